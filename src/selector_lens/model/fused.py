"""A fast forward pass computed on a HookedTransformer's own parameters (issue 6).

The same function as `HookedTransformer.forward` for the models the toolkit builds (pre-LN or
no norm, learned absolute positions, GELU / ReLU MLPs): Q, K and V in one GEMM with the bias
fused, `F.layer_norm`, PyTorch's fused attention. Gradients flow into the HookedTransformer's
parameters, so training through it trains that model; the checkpoints, hooks and every analysis
stay TransformerLens's. Tests hold it to the HookedTransformer's logits to 1e-5.

Several models of one shape run as one batched model: their weights are stacked on a leading
model axis, so a sweep's runs share each GEMM (the GPU path of `training.trainer.train_many`).

Evaluation needs a key-value cache and three of TransformerLens's hook points; `forward` takes
`past` (keys and values of earlier positions) and `fwd_hooks` on `blocks.L.hook_resid_pre`,
`blocks.L.attn.hook_z` and `blocks.L.attn.hook_pattern`, called with TransformerLens's shapes
and signature.
"""

from __future__ import annotations

import ctypes
import math
import os
import re
from collections.abc import Collection

import torch
import torch.nn.functional as F
from einops import rearrange
from jaxtyping import Float, Int
from torch import Tensor

from selector_lens.errors import SelectorLensError

# One layer's keys and values of earlier positions; each of `rows` serves `past_repeat` new rows.
KV = tuple[Float[Tensor, "rows head past d_head"], Float[Tensor, "rows head past d_head"]]
NewKV = tuple[
    Float[Tensor, "new_rows head pos d_head"], Float[Tensor, "new_rows head pos d_head"]
]  # the new positions'
Logits = Float[Tensor, "*models batch out_pos vocab"]
Resid = Float[Tensor, "*models batch pos d_model"]  # the residual stream entering a layer

ACTS = {
    "gelu": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
}
SOFTMAX_WIDTH = 16  # keys below which `_attention` pads its scores (see there)
_HOOK = re.compile(r"blocks\.(\d+)\.(attn\.hook_z|attn\.hook_pattern|hook_resid_pre)$")


_MALLOC_OPTIONS = {-3: 32 << 20, -1: 1 << 30, -2: 64 << 20}  # mmap threshold, trim, top pad
_malloc_tuned: bool | None = None


KEEP_FREED_MEMORY = "SELECTOR_LENS_KEEP_FREED_MEMORY"  # opt-in: "1" tunes glibc's malloc


def keep_freed_memory() -> bool:
    """If the user opted in (SELECTOR_LENS_KEEP_FREED_MEMORY=1), have glibc's malloc keep freed
    memory for the next allocation (once per process); returns whether the options are on.

    A forward pass frees and reallocates activations of ~16 MB, which glibc by default returns to
    the OS and takes back page by page (docs/performance.md has the measured effect). The options
    are process-wide and keep up to 1 GiB of freed memory, so a library does not set them
    unasked. Skipped where malloc is not glibc's or the user set MALLOC_* / GLIBC_TUNABLES.
    """
    global _malloc_tuned
    if _malloc_tuned is None:
        _malloc_tuned = False
        wanted = os.environ.get(KEEP_FREED_MEMORY) == "1"
        if wanted and not any(k.startswith("MALLOC_") or k == "GLIBC_TUNABLES" for k in os.environ):
            try:
                mallopt = ctypes.CDLL(None).mallopt
            except (OSError, AttributeError):  # not glibc
                return False
            _malloc_tuned = all(mallopt(k, v) == 1 for k, v in _MALLOC_OPTIONS.items())
    return _malloc_tuned


def supports(model) -> bool:
    """Can `forward` reproduce this model? Otherwise callers use the HookedTransformer itself."""
    c = model.cfg
    return (
        c.normalization_type in ("LN", None)
        and c.positional_embedding_type == "standard"
        and c.act_fn in ACTS
        and not c.gated_mlp
        and c.attention_dir == "causal"
        and c.n_key_value_heads in (None, c.n_heads)
        and c.attn_scale == math.sqrt(c.d_head)
        and getattr(c, "attn_scores_soft_cap", -1.0) <= 0
        and getattr(c, "output_logits_soft_cap", -1.0) <= 0
        and not c.final_rms
        and not getattr(c, "parallel_attn_mlp", False)
    )


def _plain(models, tokens, single, fwd_hooks, positions, start_at_layer, stop_at_layer):
    """`forward`'s answer from each HookedTransformer itself (`run_with_hooks`), for a model
    `supports` refuses: the same logits (or residual stream), TransformerLens's speed."""
    out = []
    for i, m in enumerate(models):
        x = m.run_with_hooks(
            tokens if single else tokens[i],
            fwd_hooks=list(fwd_hooks),
            start_at_layer=start_at_layer or None,
            stop_at_layer=stop_at_layer,
        )
        out.append(x if positions is None or stop_at_layer is not None else x[:, positions])
    return out[0] if single else torch.stack(out)


def hooked(model) -> bool:
    """Are TransformerLens hooks attached to the model? (`forward` would not run them.)"""
    return any(hp._forward_hooks or hp._backward_hooks for hp in model.hook_dict.values())


def stands_in(model) -> bool:
    """Can `forward` stand in for the model's own forward: a supported model with no hooks
    attached (the same logits, tested, at a fraction of TransformerLens's overhead)?"""
    return supports(model) and not hooked(model)


class _Hook:
    """What a TransformerLens hook function receives as `hook`: a name and a layer."""

    def __init__(self, name: str, layer: int):
        self.name, self._layer = name, layer

    def layer(self) -> int:
        return self._layer


def _stack(models, get) -> torch.Tensor:
    if len(models) == 1:
        return get(models[0]).unsqueeze(0)
    return torch.stack([get(m) for m in models])


def _linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """x [M, ..., k] @ w [M, k, n] + b [M, n]: one GEMM with the bias fused (batched over models)."""
    m, n = x.shape[0], w.shape[-1]
    if m == 1:  # addmm: the same product as a batch of one, without baddbmm's overhead on CPU
        return torch.addmm(b.squeeze(0), x.reshape(-1, x.shape[-1]), w.squeeze(0)).view(
            *x.shape[:-1], n
        )
    out = torch.baddbmm(b.unsqueeze(1), x.reshape(m, -1, x.shape[-1]), w)
    return out.view(*x.shape[:-1], n)


def _norm(x: torch.Tensor, w, b, eps: float) -> torch.Tensor:
    if w is None:
        return x
    if w.shape[0] == 1:
        return F.layer_norm(x, x.shape[-1:], w.squeeze(0), b.squeeze(0), eps)
    shape = (w.shape[0],) + (1,) * (x.dim() - 2) + (w.shape[-1],)
    return F.layer_norm(x, x.shape[-1:], eps=eps) * w.view(shape) + b.view(shape)


def forward(
    models,
    tokens: Int[Tensor, "*models batch pos"] | Resid,
    past: list[KV | None] | None = None,
    past_repeat: int = 1,
    fwd_hooks=(),
    positions: slice | None = None,
    keep_kv: bool = False,
    start_at_layer: int = 0,
    stop_at_layer: int | None = None,
    start_z: Float[Tensor, "batch pos head d_head"] | None = None,
    replaced: Collection[int] = (),
) -> Logits | Resid | tuple[Logits | Resid, list[NewKV | None]]:
    """Logits of `models` (one HookedTransformer, or a list of same-shape ones) on `tokens`.

    tokens: no leading axis for one model, a `models` axis for a list. `past`: per layer run, the
    keys and values of earlier positions (one model only); the new tokens follow them, and each
    past row serves `past_repeat` consecutive rows (K candidates share their prefix without
    copying it). `positions`: the positions to unembed (`out_pos`; default all). With `keep_kv`,
    also the keys and values of the new positions, per layer run ([models x batch] rows).
    As in TransformerLens, `start_at_layer` takes the residual stream entering that layer in
    place of tokens (at layer 0 too), and `stop_at_layer` returns the residual stream entering
    that layer (every position; at n_layers, the last block's output) in place of logits: runs
    that agree below a layer share those layers' work.

    Two ways to skip attention that nothing would read (one model only; such a layer's pattern
    hooks are not called and its keys and values are None): `start_z` is the first layer's
    `hook_z` as another run computed it on the same residual stream (before that run's edits),
    and `replaced` names layers whose every head the `hook_z` hooks overwrite (z enters them
    as zeros).
    """
    keep_freed_memory()
    single = not isinstance(models, (list, tuple))
    models = [models] if single else list(models)
    if not supports(models[0]):  # another architecture (a shortformer, say): the model itself
        if past or keep_kv or start_z is not None or replaced:
            raise ValueError("fused.forward's cached passes need a model it supports")
        return _plain(models, tokens, single, fwd_hooks, positions, start_at_layer, stop_at_layer)
    if single:
        tokens = tokens.unsqueeze(0)
    for m in models:
        if hooked(m):
            raise SelectorLensError(
                "the model has TransformerLens hooks attached, which fused.forward would skip; "
                "pass them as fwd_hooks (hook_resid_pre / hook_z / hook_pattern) or remove them"
            )
    cfg = models[0].cfg
    M, B, P = tokens.shape[:3]
    H, dh, d = cfg.n_heads, cfg.d_head, cfg.d_model
    hooks = {}
    for name, fn in fwd_hooks:
        m = _HOOK.match(name)
        if m is None or not single:
            raise ValueError(f"fused.forward does not support hook {name!r}")
        hooks.setdefault((int(m.group(1)), m.group(2).split("_")[-1]), []).append((name, fn))
    stop = cfg.n_layers if stop_at_layer is None else stop_at_layer
    if not 0 <= start_at_layer <= stop <= cfg.n_layers:
        raise ValueError(f"layers {start_at_layer}..{stop} out of 0..{cfg.n_layers}")
    known = [p for p in past or () if p is not None]  # None: a layer whose attention is skipped
    offset = known[0][0].shape[2] if known else 0
    if known and (not single or B != known[0][0].shape[0] * past_repeat):
        raise ValueError(
            f"{B} rows do not fit a past of {known[0][0].shape[0]} rows x {past_repeat}"
        )
    ln = cfg.normalization_type == "LN"
    act = ACTS[cfg.act_fn]
    if (start_z is not None or replaced) and not single:
        raise ValueError("start_z and replaced take one model")
    if any(not hooks.get((layer, "z")) for layer in replaced):
        raise ValueError("a replaced layer needs hook_z hooks to write its heads")

    if tokens.is_floating_point():  # a residual stream entering start_at_layer
        x = tokens
    else:
        W_E = _stack(models, lambda m: m.embed.W_E)
        x = (
            torch.stack([F.embedding(tokens[i], W_E[i]) for i in range(M)])
            if M > 1
            else F.embedding(tokens, W_E.squeeze(0))
        )
        x = x + _stack(models, lambda m: m.pos_embed.W_pos[offset : offset + P]).unsqueeze(1)
    kv = []
    # The last block only at the positions unembedded (their keys and values need every
    # position; its queries, output, MLP and residual do not): exact, ~1/8 of a training step.
    last_only = (
        positions is not None
        and stop_at_layer is None
        and past is None
        and not keep_kv
        and not any(layer == stop - 1 for layer, _ in hooks)
        and stop - 1 not in replaced
        and not (start_z is not None and start_at_layer == stop - 1)
    )
    for layer in range(start_at_layer, stop):
        for name, fn in hooks.get((layer, "pre"), ()):
            out = fn(x[0], hook=_Hook(name, layer))
            x = x if out is None else out.unsqueeze(0)
        blk = [m.blocks[layer] for m in models]
        a = [b.attn for b in blk]
        if layer == start_at_layer and start_z is not None:
            z = start_z.clone()  # the hooks below may edit it in place; it is the caller's
        elif layer in replaced:
            z = x.new_zeros(B, P, H, dh)
        else:
            layer_past = None if past is None else past[layer - start_at_layer]
            pattern_hooks = hooks.get((layer, "pattern"))
            queries = positions if last_only and layer == stop - 1 else None
            z, new_kv = _layer_attention(
                x, blk, cfg, layer_past, past_repeat, pattern_hooks, layer, queries
            )
            if queries is not None:
                x = x[:, :, queries]
            if keep_kv:
                kv.append(new_kv)
        if keep_kv and len(kv) < layer + 1 - start_at_layer:
            kv.append(None)
        for name, fn in hooks.get((layer, "z"), ()):
            z = z.contiguous()  # a hook may edit it in place and return None, as in TransformerLens
            out = fn(z, hook=_Hook(name, layer))
            z = z if out is None else out
        W_O = _stack(a, lambda t: t.W_O.reshape(H * dh, d))
        x = x + _linear(z.reshape(M, B, x.shape[2], H * dh), W_O, _stack(a, lambda t: t.b_O))
        if cfg.attn_only:  # no MLP (and no LN2) in the block
            continue
        w2 = _stack(blk, lambda b: b.ln2.w) if ln else None
        b2 = _stack(blk, lambda b: b.ln2.b) if ln else None
        h = _norm(x, w2, b2, cfg.eps)
        mlp = [b.mlp for b in blk]
        h = act(_linear(h, _stack(mlp, lambda t: t.W_in), _stack(mlp, lambda t: t.b_in)))
        x = x + _linear(h, _stack(mlp, lambda t: t.W_out), _stack(mlp, lambda t: t.b_out))
    if stop_at_layer is not None:  # as in TransformerLens, even at n_layers: the residual stream
        x = x.squeeze(0) if single else x
        return (x, kv) if keep_kv else x
    if positions is not None and not last_only:
        x = x[:, :, positions]
    wf = _stack(models, lambda m: m.ln_final.w) if ln else None
    bf = _stack(models, lambda m: m.ln_final.b) if ln else None
    x = _norm(x, wf, bf, cfg.eps)
    logits = _linear(
        x, _stack(models, lambda m: m.unembed.W_U), _stack(models, lambda m: m.unembed.b_U)
    )
    logits = logits.squeeze(0) if single else logits
    return (logits, kv) if keep_kv else logits


def _layer_attention(
    x, blk, cfg, past, past_repeat: int, pattern_hooks, layer: int, queries: slice | None = None
):
    """One layer's attention: LN1, Q, K and V of every head in one GEMM, causal attention onto
    `past` and the new positions. Returns z in TransformerLens's hook_z layout [rows, pos, head,
    d_head] and the new positions' keys and values. With `queries` (no past, no hooks), only
    those positions query: their z, [rows, queries, head, d_head]."""
    M, B, P = x.shape[:3]
    H, dh, ln = cfg.n_heads, cfg.d_head, cfg.normalization_type == "LN"
    a = [b.attn for b in blk]
    w1 = _stack(blk, lambda b: b.ln1.w) if ln else None
    b1 = _stack(blk, lambda b: b.ln1.b) if ln else None
    h = _norm(x, w1, b1, cfg.eps)
    # Q, K and V of every head as one [d_model, 3 * H * d_head] matrix: one GEMM per layer.
    which = ("W_Q", "W_K", "W_V") if queries is None else ("W_K", "W_V")
    W = _stack(
        a, lambda t: rearrange(torch.stack([getattr(t, w) for w in which]), "n h d e -> d (n h e)")
    )
    b = _stack(
        a,
        lambda t: rearrange(
            torch.stack([getattr(t, "b" + w[1:]) for w in which]), "n h e -> (n h e)"
        ),
    )
    out = _linear(h, W, b).view(M * B, P, len(which), H, dh)
    heads = [t.transpose(1, 2) for t in out.unbind(2)]  # [rows, head, pos, d_head] each
    if queries is None:
        q, k, v = heads
        z = _attention(q, k, v, past, past_repeat, pattern_hooks, layer)
        return z.transpose(1, 2), (k, v)
    k, v = heads
    hq = h[:, :, queries]
    W_Q = _stack(a, lambda t: rearrange(t.W_Q, "h d e -> d (h e)"))
    q = _linear(hq, W_Q, _stack(a, lambda t: t.b_Q.reshape(-1)))
    q = q.view(M * B, hq.shape[2], H, dh).transpose(1, 2)
    at = torch.arange(P, device=x.device)
    causal = at[queries][:, None] >= at[None, :]  # [queries, keys]
    z = F.scaled_dot_product_attention(q, k, v, attn_mask=causal)
    return z.transpose(1, 2), (k, v)


def _attention(q, k, v, past, repeat: int, pattern_hooks, layer: int) -> torch.Tensor:
    """Causal attention of the new positions onto `past` and themselves; [rows, H, P, dh].

    Without a past or pattern hooks this is PyTorch's fused kernel. Otherwise the scores are
    explicit; the past's scores are one batched product per past row for all `repeat` rows
    that share it.
    """
    if past is None and not pattern_hooks:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    rows, H, P, dh = q.shape
    scale = 1 / math.sqrt(dh)
    causal = torch.ones(P, P, dtype=torch.bool, device=q.device).tril()
    scores = (q @ k.transpose(-1, -2) * scale).masked_fill(~causal, float("-inf"))
    S0 = 0
    parts = [scores]
    if past is not None:
        kp, vp = past
        n, S0 = kp.shape[0], kp.shape[2]
        qg = q.view(n, repeat, H, P, dh).transpose(1, 2).reshape(n, H, repeat * P, dh)
        sp = (qg @ kp.transpose(-1, -2) * scale).view(n, H, repeat, P, S0).transpose(1, 2)
        parts.insert(0, sp.reshape(rows, H, P, S0))
    # PyTorch's CPU softmax runs a scalar loop over a last axis shorter than its vector width
    # (16 floats): 14x slower at 15 keys than at 16 (measured). Keys padded with -inf to 16
    # add exact zeros to each sum.
    pad = SOFTMAX_WIDTH - (S0 + P)
    if pad > 0:
        parts.append(scores.new_full((1, 1, 1, 1), float("-inf")).expand(rows, H, P, pad))
    pattern = torch.cat(parts, -1).softmax(-1) if len(parts) > 1 else scores.softmax(-1)
    pattern = pattern[..., : S0 + P]
    if pattern_hooks and pad > 0:
        pattern = pattern.contiguous()  # as TransformerLens hands it to a hook
    for name, fn in pattern_hooks or ():
        out = fn(pattern, hook=_Hook(name, layer))
        pattern = pattern if out is None else out
    z = pattern[..., S0:] @ v
    if past is not None:
        pg = (
            pattern[..., :S0]
            .reshape(n, repeat, H, P, S0)
            .transpose(1, 2)
            .reshape(n, H, repeat * P, S0)
        )
        z = z + (pg @ vp).view(n, H, repeat, P, dh).transpose(1, 2).reshape(rows, H, P, dh)
    return z
