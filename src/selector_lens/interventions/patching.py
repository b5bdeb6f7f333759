"""Activation patching (TransformerLens conventions: a metric callable on logits).

`patch` runs the corrupted input with one activation at a time replaced by its clean value and
returns the metric for each, shaped like `transformer_lens.patching` returns it
([n_layers, pos] for residual sites, [n_layers, pos, n_heads] for `z`). Patches are batched:
several patched copies of the corrupted batch go through one forward pass, which starts at the
patched layer from the corrupted run's residual stream (the layers below are the same for all).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from ..errors import SelectorLensError

SITES = {
    "resid_pre": "hook_resid_pre",
    "resid_mid": "hook_resid_mid",
    "resid_post": "hook_resid_post",
    "attn_out": "hook_attn_out",
    "mlp_out": "hook_mlp_out",
    "z": "attn.hook_z",
}


@torch.inference_mode()
def patch(
    model,
    clean_tokens: Int[Tensor, "batch seq"],
    corrupt_tokens: Int[Tensor, "batch seq"],
    site: str,
    metric: Callable[[Float[Tensor, "batch seq vocab"]], Float[Tensor, ""]],
    positions: list[int] | str | None = None,
    heads: list[int] | None = None,
    patches_per_pass: int = 16,
) -> Float[Tensor, "layer ..."]:
    """Metric of the corrupted run with each (layer, position[, head]) activation patched from clean.

    `positions`: None for every position one at a time, a list of positions one at a time, or
    "all" for every position at once. The result is [layer, pos] ([layer, pos, head] for `z`);
    with "all", [layer] ([layer, head] for `z`), like TransformerLens's `*_all_pos` functions.
    """
    if site not in SITES:
        raise SelectorLensError(f"unknown site {site!r}; choose one of {', '.join(SITES)}")
    if clean_tokens.shape != corrupt_tokens.shape:
        raise SelectorLensError(
            f"clean {tuple(clean_tokens.shape)} and corrupt {tuple(corrupt_tokens.shape)} tokens differ in shape"
        )
    L, H = model.cfg.n_layers, model.cfg.n_heads
    B, seq = corrupt_tokens.shape
    at_once = isinstance(positions, str) and positions == "all"
    if at_once or positions is None:
        positions = list(range(seq))
    positions = [int(p) for p in positions]
    if any(not 0 <= p < seq for p in positions):
        raise SelectorLensError(f"positions must lie in 0..{seq - 1}, got {positions}")
    groups = [positions] if at_once else [[p] for p in positions]
    if site == "z":
        heads = list(range(H)) if heads is None else [int(h) for h in heads]
        if any(not 0 <= h < H for h in heads):
            raise SelectorLensError(f"head out of range: the model has heads 0..{H - 1}")
        index = [(p, h) for p in groups for h in heads]
    else:
        index = [(p, None) for p in groups]
    device = next(model.parameters()).device
    clean_tokens, corrupt_tokens = clean_tokens.to(device), corrupt_tokens.to(device)
    names = [f"blocks.{layer}.{SITES[site]}" for layer in range(L)]
    _, cache = model.run_with_cache(clean_tokens, names_filter=set(names).__contains__)
    starts = [f"blocks.{layer}.hook_resid_pre" for layer in range(L)]
    _, corrupt = model.run_with_cache(corrupt_tokens, names_filter=set(starts).__contains__)
    out = torch.zeros(L, len(index))
    for l, name in enumerate(names):
        clean = cache[name]
        # a patch at layer l leaves the layers below it corrupted: start there (TransformerLens's
        # start_at_layer) from the corrupted run's residual stream
        start = corrupt[starts[l]]
        for lo in range(0, len(index), patches_per_pass):
            chunk = index[lo : lo + patches_per_pass]

            def hook(act, hook, chunk=chunk, clean=clean):
                act = act.view(len(chunk), B, *act.shape[1:])
                for i, (p, h) in enumerate(chunk):
                    if h is None:
                        act[i, :, p] = clean[:, p]
                    else:
                        act[i, :, p, h] = clean[:, p, h]
                return act.view(len(chunk) * B, *act.shape[2:])

            logits = model.run_with_hooks(
                start.repeat(len(chunk), 1, 1), start_at_layer=l, fwd_hooks=[(name, hook)]
            )
            logits = logits.view(len(chunk), B, *logits.shape[1:])
            for i in range(len(chunk)):
                out[l, lo + i] = float(metric(logits[i]))
    shape = (L,) + (() if at_once else (len(positions),)) + ((len(heads),) if site == "z" else ())
    return out.view(shape)


@dataclass
class ZCorruption:
    """Clean inputs and the same inputs with another selector: same B, so the target changes."""

    clean: Int[Tensor, "n seq"]
    corrupt: Int[Tensor, "n seq"]
    clean_target: Int[Tensor, " n"]  # a1 of the clean example
    corrupt_target: Int[Tensor, " n"]  # a1 that the corrupted selector points to
    pos: int  # the position that predicts a1
    z_positions: list[int]


def z_corruption(data, examples=None, shift: int = 1) -> ZCorruption:
    """Swap each example's z for z_{(i + shift) mod K} (default: every example of `data`)."""
    task = data.task
    if task.direction != "bz_to_a" or task.k < 2:
        raise SelectorLensError(
            f"z corruption needs a bz_to_a task with K >= 2 (this is {task.direction}, K={task.k}): "
            "elsewhere z does not change the target"
        )
    if shift % task.k == 0:
        raise SelectorLensError(
            f"shift {shift} is a multiple of K={task.k}: the selector would not change"
        )
    ex = torch.arange(len(data.tokens)) if examples is None else torch.as_tensor(examples)
    other = data.group[ex] * task.k + (data.choice[ex] + shift) % task.k
    clean = data.tokens[ex]
    corrupt = clean.clone()
    corrupt[:, task.z_positions] = data.tokens[other][:, task.z_positions]
    first = task.source_length
    return ZCorruption(
        clean, corrupt, clean[:, first], data.tokens[other][:, first], first - 1, task.z_positions
    )


def logit_diff(logits: Float[Tensor, "n seq vocab"], corruption: ZCorruption) -> Float[Tensor, ""]:
    """Mean logit of the clean a1 minus that of the corrupted a1, at the a1-predicting position."""
    at = logits[:, corruption.pos]
    rows = torch.arange(len(at))
    return (
        at[rows, corruption.clean_target.to(at.device)]
        - at[rows, corruption.corrupt_target.to(at.device)]
    ).mean()


@torch.inference_mode()
def normalized_logit_diff(model, corruption: ZCorruption):
    """Metric callable: 0 = the corrupted run's logit difference, 1 = the clean run's.

    Ill-conditioned when the two are close (a model that ignores z); `.clean` and `.corrupt`
    on the returned callable hold them so a reader can see the denominator.
    """
    device = next(model.parameters()).device
    clean = logit_diff(model(corruption.clean.to(device)), corruption).item()
    corrupt = logit_diff(model(corruption.corrupt.to(device)), corruption).item()

    def metric(logits):
        return (logit_diff(logits, corruption) - corrupt) / (clean - corrupt)

    metric.clean, metric.corrupt = clean, corrupt
    return metric


PATCHING_VERSION = "2"  # bump when the numbers change: stored tables are then recomputed


def patch_series(
    run,
    site: str = "resid_pre",
    steps=None,
    n_examples: int = 200,
    seed: int = 0,
    recompute: bool = False,
):
    """`patch` with the z corruption and normalised logit difference at each checkpoint: a tidy
    DataFrame step x layer x pos (x head), with the clean and corrupt logit differences. Kept in
    the run's analysis store (`recompute=True` bypasses it)."""
    from ..store import per_step

    if site not in SITES:
        raise SelectorLensError(f"unknown site {site!r}; choose one of {', '.join(SITES)}")
    z_corruption(run.task_data, [0])  # one clear error for a run without a z to corrupt
    params = {"site": site, "n_examples": n_examples, "seed": seed}
    return per_step(
        run,
        "patching",
        PATCHING_VERSION,
        params,
        steps,
        lambda todo: _patch_table(run, site, todo, n_examples, seed),
        recompute,
    )


def _patch_table(run, site, steps, n_examples, seed):
    """Only the positions from z to the a1-predicting one are patched: before z the clean and
    corrupted runs are the same (causal attention, same tokens), and after the read position
    nothing reaches its logits, so patching there leaves the corrupted run as it is: exactly 0
    on the normalised scale, written without a forward pass. For the same reason the patched
    runs stop at the read position."""
    import pandas as pd

    data = run.task_data
    n = min(n_examples, len(data.tokens))
    examples = np.sort(np.random.default_rng(seed).choice(len(data.tokens), n, replace=False))
    corr = z_corruption(data, examples)
    seq = corr.clean.shape[1]
    live = list(range(min(corr.z_positions), corr.pos + 1))
    rows = []
    for step, model in run.series(steps):
        metric = normalized_logit_diff(model, corr)
        result = torch.zeros(
            (model.cfg.n_layers, seq) + ((model.cfg.n_heads,) if site == "z" else ())
        )
        upto = slice(0, corr.pos + 1)  # causal: the tokens after the read position cannot matter
        result[:, live] = patch(
            model, corr.clean[:, upto], corr.corrupt[:, upto], site, metric, positions=live
        )
        for idx in np.ndindex(*result.shape):
            row = {"step": step, "site": site, "layer": idx[0], "pos": idx[1]}
            if site == "z":
                row["head"] = idx[2]
            rows.append(
                {
                    **row,
                    "value": result[idx].item(),
                    "clean_logit_diff": metric.clean,
                    "corrupt_logit_diff": metric.corrupt,
                }
            )
    return pd.DataFrame(rows)
