"""Dense evaluation over whole groups (docs/science.md section 3), batched.

Per chunk of whole groups, through `fused.forward` with a key-value cache: the positions before z
once per group (its K examples share them), the rest of each example's clean and z-deranged
prefix once, then every candidate's target tokens on its example's cached clean prefix (shared by
the K candidates without copying it). Everything else (loss on A tokens and EOS, token accuracy,
first-target loss, attention to z) falls out of those passes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypedDict, runtime_checkable

import torch
from jaxtyping import Int
from torch import Tensor

from selector_lens.errors import SelectorLensError
from selector_lens.task.eval_set import EvalSet
from selector_lens.task.selector import SelectorTask

# Candidate tokens per chunk. At d_mlp = 512 a chunk's largest activation is then 8 MB, which
# glibc serves again from freed memory: at 8192 (16 MB) an evaluation of the K = 10 paper run
# faulted in 35,000-65,000 fresh pages and took 1.03-1.12 x as long (2026-12-06); at 16384 every
# chunk's activations were fresh pages. Smaller chunks pay per-op overhead (2048: 1.05 x).
MAX_ROWS = 4096


class EvalRow(TypedDict):
    """What `evaluate` returns: one evaluation (docs/science.md section 3); None where undefined."""

    loss: float
    first_target_loss: float
    token_acc: float
    candidate_loss: float | None
    candidate_acc: float | None
    dz: float | None  # the z-deranged first-target loss minus the clean one
    attn_to_z: list[list[float]] | None  # [layer][head]
    group_correct: list[int] | None


class MetricsRow(EvalRow):
    """One line of a run's metrics.jsonl: an evaluation and when it was taken."""

    step: int
    examples_seen: int
    lr: float
    wall_s: float


@runtime_checkable
class Intervention(Protocol):
    """What `evaluate` calls on an intervention (e.g. `HeadAblation`)."""

    @property
    def per_example(self) -> bool:
        """False when it acts alike on every example of a group before z (the group's shared
        prefix may then run once per group)."""

    def hooks(self, examples: Int[Tensor, " rows"], offset: int) -> list[tuple[str, Callable]]:
        """TransformerLens hooks for a forward pass whose rows are these eval examples and whose
        first position is `offset`."""

    # Optional: `replaced_layers(n_heads) -> set[int]`, the layers whose every head's hook_z the
    # hooks overwrite; their attention is then computed only where a metric reads it.


@dataclass(frozen=True)
class _Layout:
    """How `evaluate` cuts its passes: positions before `split` run once per `per_group` examples
    (a group's K examples share them); each example has `r` prefix rows (clean, and z-deranged
    when there is a z), interleaved; `chunk` examples (whole groups) per pass."""

    split: int
    r: int
    per_group: int
    chunk: int


def _layout(es: EvalSet, max_rows: int, interventions) -> _Layout:
    task, K = es.task, es.task.k
    S, T, C = task.source_length, task.target_length, es.candidates.shape[1]
    split = min(task.z_positions) if es.deranged is not None else S - 1
    r = 2 if es.deranged is not None else 1
    shared = K > 1 and bool(
        (es.tokens[:, :split].view(-1, K, split) == es.tokens[::K, None, :split]).all()
    )
    if any(getattr(i, "per_example", True) for i in interventions if i is not None):
        shared = False  # an intervention that does not say is taken to act per example
    return _Layout(split, r, K if shared else 1, K * max(1, max_rows // (K * C * T)))


@torch.inference_mode()
def evaluate(
    model, es: EvalSet, max_rows: int = MAX_ROWS, intervention: Intervention | None = None
) -> EvalRow:
    """All per-eval metrics of docs/science.md section 3 on `es`; undefined ones are None.

    Per chunk of whole groups, three cached passes through `fused.forward` (equal to the
    HookedTransformer): the positions before z, once per group (`_layout`); the rest of each
    example's clean and z-deranged prefix; then every candidate's target tokens on its
    example's clean prefix (`_passes`). `max_rows` bounds the candidate tokens per chunk.
    `intervention` (an `Intervention`, e.g. a head ablation) supplies TransformerLens hooks for
    each pass; the first pass runs per group only if it says `per_example` is False.
    """
    return evaluate_branches(model, es, [intervention], max_rows=max_rows)[0]


@torch.inference_mode()
def evaluate_branches(
    model,
    es: EvalSet,
    interventions: list[Intervention | None],
    from_layer: int | list[int] = 0,
    trunk: Intervention | None = None,
    max_rows: int = MAX_ROWS,
) -> list[EvalRow]:
    """`evaluate` under each of `interventions`, sharing the work they have in common.

    `from_layer`: per intervention (or one for all), the layer below which it acts on the model
    exactly as `trunk` does (None: not at all). Per chunk, one trunk run computes those layers
    once for all of them, and layer l's attention too (it reads only the residual stream
    entering l): each intervention then runs from layer l's `hook_z` on, starting from the
    trunk's residual stream and z there. Layers whose every head an intervention overwrites
    (`replaced_layers`) compute no attention where nothing reads it. Equal to one `evaluate` each.
    """
    from selector_lens.model import fused

    if not fused.supports(model):
        raise SelectorLensError(
            "evaluate needs a model built from a ModelConfig (pre-LN or no norm, standard positions)"
        )
    L, H = model.cfg.n_layers, model.cfg.n_heads
    starts = [from_layer] * len(interventions) if isinstance(from_layer, int) else from_layer
    if len(starts) != len(interventions):
        raise SelectorLensError(
            f"{len(starts)} from_layer values for {len(interventions)} branches"
        )
    for start in starts:
        if not 0 <= start < L:
            raise SelectorLensError(f"from_layer {start} out of range: layers 0..{L - 1}")
    task, N, T = es.task, len(es.tokens), es.task.target_length
    lay = _layout(es, max_rows, [trunk, *interventions])
    tots = [_Totals.start(L, H, len(es.groups)) for _ in interventions]
    shared = len(interventions) > 1 or max(starts, default=0) > 0
    trunk_attn = torch.zeros(L, H, dtype=torch.float64)
    for lo in range(0, N, lay.chunk):
        ex = torch.arange(lo, min(N, lo + lay.chunk))
        inputs = _pass_tokens(es, ex, lay)
        if shared:  # per start layer: the trunk's three passes' residual streams and z there
            at = _passes(model, es, ex, lay, trunk, trunk_attn, inputs, capture=set(starts))
        for tot, intervention, start in zip(tots, interventions, starts):
            if shared:
                logits = _passes(model, es, ex, lay, intervention, tot.attn, *at[start], start)
            else:
                logits = _passes(model, es, ex, lay, intervention, tot.attn, inputs)
            tot.add(es, ex, *logits)
    if shared:  # the trunk's attention up to each start layer is its branches'
        for tot, start in zip(tots, starts):
            tot.attn[: start + 1] += trunk_attn[: start + 1]
    return [tot.row(task, N, T, es.deranged is not None) for tot in tots]


@dataclass
class _Totals:
    """Running sums of one evaluation over its chunks."""

    sums: dict
    attn: Tensor  # [layer, head]: attention to z from the a1-predicting position, summed
    group_correct: Tensor

    @classmethod
    def start(cls, n_layers: int, n_heads: int, n_groups: int) -> _Totals:
        sums = dict(loss=0.0, first=0.0, first_deranged=0.0, cand=0.0, cand_ok=0, tok_ok=0)
        attn = torch.zeros(n_layers, n_heads, dtype=torch.float64)
        return cls(sums, attn, torch.zeros(n_groups, dtype=torch.long))

    def add(self, es: EvalSet, ex, prefix_logits, candidate_logits) -> None:
        """Add examples `ex`, from the logits of the last two passes."""
        tot, r, T = self.sums, 2 if es.deranged is not None else 1, es.task.target_length
        logp = prefix_logits[:, -1].float().log_softmax(-1).cpu()
        first_logp, deranged_logp = logp[::r], (logp[1::r] if r == 2 else None)
        cand = es.candidates[ex]  # [n, C, T + 1]
        n, C = cand.shape[:2]
        rest_logp = candidate_logits.float().log_softmax(-1).cpu().reshape(n, C, T, -1)
        tok_logp = torch.cat(  # teacher-forced log-prob of each candidate token [n, C, T + 1]
            [
                first_logp.gather(-1, cand[:, :, 0]).unsqueeze(-1),
                rest_logp.gather(-1, cand[:, :, 1:].unsqueeze(-1)).squeeze(-1),
            ],
            dim=-1,
        )
        rows, correct = torch.arange(n), es.correct[ex]
        true, true_logp = cand[rows, correct], tok_logp[rows, correct]  # [n, T + 1] each
        tot["loss"] -= true_logp.sum().item()
        tot["first"] -= true_logp[:, 0].sum().item()
        greedy = torch.cat(
            [first_logp.argmax(-1, keepdim=True), rest_logp[rows, correct].argmax(-1)], -1
        )
        tot["tok_ok"] += (greedy == true).sum().item()
        if deranged_logp is not None:
            tot["first_deranged"] -= deranged_logp.gather(-1, true[:, :1]).sum().item()
        if es.task.has_candidates:
            scores = tok_logp.sum(-1)  # [n, C]: each candidate's sequence log-probability
            tot["cand"] -= scores.log_softmax(-1)[rows, correct].sum().item()
            ok = scores.argmax(-1) == correct
            tot["cand_ok"] += ok.sum().item()
            self.group_correct.index_add_(0, es.group_pos[ex], ok.long())

    def row(self, task: SelectorTask, N: int, T: int, has_dz: bool) -> EvalRow:
        tot, attn = self.sums, self.attn
        out: EvalRow = {
            "loss": tot["loss"] / (N * (T + 1)),
            "first_target_loss": tot["first"] / N,
            "token_acc": tot["tok_ok"] / (N * (T + 1)),
            "candidate_loss": tot["cand"] / N if task.has_candidates else None,
            "candidate_acc": tot["cand_ok"] / N if task.has_candidates else None,
            "dz": tot["first_deranged"] / N - tot["first"] / N if has_dz else None,
            "attn_to_z": (attn / N).tolist() if task.z_positions else None,
            "group_correct": self.group_correct.tolist() if task.has_candidates else None,
        }
        return out


def _pass_tokens(es: EvalSet, ex, lay: _Layout) -> tuple[Tensor, Tensor, Tensor]:
    """The three passes' tokens for examples `ex`: the shared positions (one row per group, or
    per example), the rest of each prefix (clean and z-deranged rows interleaved: example i at
    rows 2i, 2i + 1), and every candidate's target tokens ([n x C] rows)."""
    S, T, n = es.task.source_length, es.task.target_length, len(ex)
    first = es.tokens[ex[:: lay.per_group], : lay.split]
    rest = es.tokens[ex, lay.split : S]
    if lay.r == 2:
        rest = torch.stack([rest, es.deranged[ex, lay.split :]], 1).reshape(2 * n, S - lay.split)
    cand = es.candidates[ex]
    return first, rest, cand[:, :, :T].reshape(-1, T)


def _passes(
    model,
    es: EvalSet,
    ex,
    lay: _Layout,
    intervention,
    attn,
    inputs,
    start_z=None,
    start=0,
    capture=(),
):
    """The three passes over examples `ex` from layer `start`, on `inputs` (their tokens, or
    their residual streams entering `start`); `start_z`: per pass, layer
    start's z from a trunk run (`fused.forward`). The a1 position's attention to z in the layers
    run is added into `attn` [layer, head]. Returns the logits of the prefix's last position
    (one row per prefix row) and of every candidate token ([n x C] rows); with `capture`
    (layers), stops after the last of them and returns per captured layer the passes'
    residual streams entering it and their z there (before `intervention` edits it)."""
    from selector_lens.model import fused

    device, S, zpos = next(model.parameters()).device, es.task.source_length, es.task.z_positions
    r, C, L = lay.r, es.candidates.shape[1], model.cfg.n_layers
    stop = max(capture) + 1 if capture else L
    kept = {layer: ([], []) for layer in capture}

    def hooks(rows, offset):
        out = []
        for layer in capture:  # first, so they see z before the intervention's edits
            out.append(
                (f"blocks.{layer}.hook_resid_pre", lambda x, hook: kept[hook.layer()][0].append(x))
            )
            out.append(
                (
                    f"blocks.{layer}.attn.hook_z",
                    lambda z, hook: kept[hook.layer()][1].append(z.clone()),
                )
            )
        return out + (intervention.hooks(rows, offset) if intervention is not None else [])

    start_z = start_z or (None, None, None)
    run = dict(start_at_layer=start, stop_at_layer=stop if capture else None)
    heads_of = ex[:: lay.per_group]  # one row per group, or per example
    out0, kv0 = fused.forward(
        model,
        inputs[0].to(device),
        fwd_hooks=hooks(heads_of, 0),
        positions=slice(0, 0),
        keep_kv=True,
        start_z=start_z[0],
        **run,
    )
    hooks1 = hooks(ex.repeat_interleave(r), lay.split)
    if zpos:

        def grab(pattern, hook):
            attn[hook.layer()] += pattern[::r, :, -1, zpos].sum((0, 2)).double().cpu()

        hooks1 += [(f"blocks.{layer}.attn.hook_pattern", grab) for layer in range(start, stop)]
    out1, kv1 = fused.forward(
        model,
        inputs[1].to(device),
        past=kv0,
        past_repeat=lay.per_group * r,
        fwd_hooks=hooks1,
        positions=slice(-1, None),
        keep_kv=True,
        start_z=start_z[1],
        **run,
    )
    prefix_kv = [  # the shared positions repeated per example, then the example's clean rows
        None
        if a is None  # layer start, whose z was given: no keys or values in either pass
        else (
            torch.cat([a[0].repeat_interleave(lay.per_group, 0), b[0][::r]], 2),
            torch.cat([a[1].repeat_interleave(lay.per_group, 0), b[1][::r]], 2),
        )
        for a, b in zip(kv0, kv1)
    ]
    # The candidates' attention is read by nothing in a layer whose heads are all overwritten.
    replaced = getattr(intervention, "replaced_layers", lambda n_heads: ())(model.cfg.n_heads)
    first = start + (start_z[2] is not None)  # layer start's z is given
    replaced = {layer for layer in replaced if first <= layer < stop and layer not in capture}
    out2 = fused.forward(
        model,
        inputs[2].to(device),
        past=prefix_kv,
        past_repeat=C,
        fwd_hooks=hooks(ex.repeat_interleave(C), S),
        start_z=start_z[2],
        replaced=replaced,
        **run,
    )
    if capture:
        return {layer: (tuple(x), tuple(z)) for layer, (x, z) in kept.items()}
    return out1, out2
