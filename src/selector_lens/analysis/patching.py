"""Activation patching (TransformerLens conventions: a metric callable on logits).

`patch` runs the corrupted input with one activation at a time replaced by its clean value and
returns the metric for each, shaped like `transformer_lens.patching` returns it
([n_layers, pos] for residual sites, [n_layers, pos, n_heads] for `z`). Patches are batched:
several patched copies of the corrupted batch go through one forward pass, which starts at the
patched layer from the corrupted run's residual stream (the layers below are the same for all).
At the sites `fused.forward` has hook points for (resid_pre, z) the pass also starts at the
patched position (`_patch_windows`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from jaxtyping import Float, Int

from selector_lens.errors import SelectorLensError
from selector_lens.lazy import inference_mode, lazy_module

torch = lazy_module("torch")  # imported on first use: a stored table needs no torch

SITES = {
    "resid_pre": "hook_resid_pre",
    "resid_mid": "hook_resid_mid",
    "resid_post": "hook_resid_post",
    "attn_out": "hook_attn_out",
    "mlp_out": "hook_mlp_out",
    "z": "attn.hook_z",
}


@inference_mode
def patch(
    model,
    clean_tokens: Int[torch.Tensor, "batch seq"],
    corrupt_tokens: Int[torch.Tensor, "batch seq"],
    site: str,
    metric: Callable[[Float[torch.Tensor, "batch seq vocab"]], Float[torch.Tensor, ""]],
    positions: list[int] | str | None = None,
    heads: list[int] | None = None,
    patches_per_pass: int = 16,
) -> Float[torch.Tensor, "layer ..."]:
    """Metric of the corrupted run with each (layer, position[, head]) activation patched from clean.

    `positions`: None for every position one at a time, a list of positions one at a time, or
    "all" for every position at once. The result is [layer, pos] ([layer, pos, head] for `z`);
    with "all", [layer] ([layer, head] for `z`), like TransformerLens's `*_all_pos` functions.
    """
    from selector_lens.model import fused  # torch: imported where a model runs

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
    if site in ("resid_pre", "z") and fused.stands_in(model):  # hook points fused.forward has
        out = _patch_windows(
            model, clean_tokens, corrupt_tokens, names, metric, index, patches_per_pass
        )
    else:
        out = _patch_hooked(
            model, clean_tokens, corrupt_tokens, names, metric, index, patches_per_pass
        )
    shape = (L,) + (() if at_once else (len(positions),)) + ((len(heads),) if site == "z" else ())
    return out.view(shape)


def _patch_hooked(model, clean_tokens, corrupt_tokens, names, metric, index, per_pass):
    """`patch` through the HookedTransformer: per layer, `per_pass` patched copies of the
    corrupted batch in one forward pass from that layer."""
    L, B = len(names), len(corrupt_tokens)
    _, cache = model.run_with_cache(clean_tokens, names_filter=set(names).__contains__)
    starts = [f"blocks.{layer}.hook_resid_pre" for layer in range(L)]
    _, corrupt = model.run_with_cache(corrupt_tokens, names_filter=set(starts).__contains__)
    out = torch.zeros(L, len(index))
    for l, name in enumerate(names):
        clean = cache[name]
        # a patch at layer l leaves the layers below it corrupted: start there (TransformerLens's
        # start_at_layer) from the corrupted run's residual stream
        start = corrupt[starts[l]]
        for lo in range(0, len(index), per_pass):
            chunk = index[lo : lo + per_pass]

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
    return out


def _patch_windows(model, clean_tokens, corrupt_tokens, names, metric, index, per_pass):
    """`patch` through `fused.forward`, running only what a patch can change. Causal attention:
    a patch whose first position is p leaves every earlier position as the corrupted run has it
    at every layer, so its pass starts at its layer and at position p, attending to the
    corrupted run's keys and values before p, and its logits before p are the corrupted run's.
    The patches of one position share that past (example-major rows)."""
    from selector_lens.model import fused  # torch: imported where a model runs

    L, B = len(names), len(corrupt_tokens)
    clean, starts = {}, {}

    def keep(act, hook):
        clean[hook.layer()] = act.clone()

    def keep_start(x, hook):
        starts[hook.layer()] = x

    fused.forward(model, clean_tokens, fwd_hooks=[(n, keep) for n in names], positions=slice(0, 0))
    pre = [(f"blocks.{layer}.hook_resid_pre", keep_start) for layer in range(L)]
    corrupt_logits, kv = fused.forward(model, corrupt_tokens, fwd_hooks=pre, keep_kv=True)
    by_start = defaultdict(list)  # first patched position -> indices into `index`
    for i, (ps, _) in enumerate(index):
        by_start[min(ps)].append(i)
    out = torch.zeros(L, len(index))
    for l, name in enumerate(names):
        for p0, members in by_start.items():
            past = [(k[:, :, :p0], v[:, :, :p0]) for k, v in kv[l:]] if p0 else None
            for lo in range(0, len(members), per_pass):
                chunk = members[lo : lo + per_pass]
                n = len(chunk)

                def hook(act, hook, chunk=chunk, l=l, p0=p0, n=n):
                    a = act.view(B, n, *act.shape[1:])  # row e * n + j: example e, patch j
                    for j, i in enumerate(chunk):
                        ps, h = index[i]
                        at = [p - p0 for p in ps]
                        if h is None:
                            a[:, j, at] = clean[l][:, ps]
                        else:
                            a[:, j, at, h] = clean[l][:, ps, h]
                    return act

                x = starts[l][:, p0:].repeat_interleave(n, 0)
                logits = fused.forward(
                    model, x, past=past, past_repeat=n, start_at_layer=l, fwd_hooks=[(name, hook)]
                )
                logits = logits.view(B, n, *logits.shape[1:])
                for j, i in enumerate(chunk):
                    full = torch.cat([corrupt_logits[:, :p0], logits[:, j]], 1)
                    out[l, i] = float(metric(full))
    return out


@dataclass
class ZCorruption:
    """Clean inputs and the same inputs with another selector: same B, so the target changes."""

    clean: Int[torch.Tensor, "n seq"]
    corrupt: Int[torch.Tensor, "n seq"]
    clean_target: Int[torch.Tensor, " n"]  # a1 of the clean example
    corrupt_target: Int[torch.Tensor, " n"]  # a1 that the corrupted selector points to
    pos: int  # the position that predicts a1
    z_positions: list[int]


def check_corruptible(task, shift: int = 1) -> None:
    """One clear error where swapping z cannot change the target."""
    if task.direction != "bz_to_a" or task.k < 2:
        raise SelectorLensError(
            f"z corruption needs a bz_to_a task with K >= 2 (this is {task.direction}, K={task.k}): "
            "elsewhere z does not change the target"
        )
    if shift % task.k == 0:
        raise SelectorLensError(
            f"shift {shift} is a multiple of K={task.k}: the selector would not change"
        )


def z_corruption(data, examples=None, shift: int = 1) -> ZCorruption:
    """Swap each example's z for z_{(i + shift) mod K} (default: every example of `data`)."""
    task = data.task
    check_corruptible(task, shift)
    ex = torch.arange(len(data.tokens)) if examples is None else torch.as_tensor(examples)
    other = data.group[ex] * task.k + (data.choice[ex] + shift) % task.k
    clean = data.tokens[ex]
    corrupt = clean.clone()
    corrupt[:, task.z_positions] = data.tokens[other][:, task.z_positions]
    first = task.source_length
    return ZCorruption(
        clean, corrupt, clean[:, first], data.tokens[other][:, first], first - 1, task.z_positions
    )


def logit_diff(
    logits: Float[torch.Tensor, "n seq vocab"], corruption: ZCorruption
) -> Float[torch.Tensor, ""]:
    """Mean logit of the clean a1 minus that of the corrupted a1, at the a1-predicting position."""
    at = logits[:, corruption.pos]
    rows = torch.arange(len(at))
    return (
        at[rows, corruption.clean_target.to(at.device)]
        - at[rows, corruption.corrupt_target.to(at.device)]
    ).mean()


@inference_mode
def normalized_logit_diff(model, corruption: ZCorruption):
    """Metric callable: 0 = the corrupted run's logit difference, 1 = the clean run's.

    Ill-conditioned when the two are close (a model that ignores z); `.clean` and `.corrupt`
    on the returned callable hold them so a reader can see the denominator.
    """
    from selector_lens.model import fused  # torch: imported where a model runs

    device, upto = next(model.parameters()).device, corruption.pos + 1  # causal: read at pos
    run = (lambda t: fused.forward(model, t)) if fused.stands_in(model) else model
    clean = logit_diff(run(corruption.clean[:, :upto].to(device)), corruption).item()
    corrupt = logit_diff(run(corruption.corrupt[:, :upto].to(device)), corruption).item()

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
    DataFrame step x layer x pos (x head), with the clean and corrupt logit differences (another
    task: its own corruption and focus loss, `_task_patch_rows`). Kept in the run's analysis
    store (`recompute=True` bypasses it)."""
    from selector_lens.runs.store import per_checkpoint

    if site not in SITES:
        raise SelectorLensError(f"unknown site {site!r}; choose one of {', '.join(SITES)}")
    task = run.config.task
    params = {"site": site, "n_examples": n_examples, "seed": seed}
    if task.name != "selector":
        from selector_lens.task.protocol import require

        require(task, "corrupt")
        make_rows = lambda: _task_patch_rows(run, site, n_examples, seed)  # noqa: E731
    else:
        check_corruptible(task)  # one clear error for a run without a z to corrupt
        make_rows = lambda: _patch_rows(run, site, n_examples, seed)  # noqa: E731
    return per_checkpoint(run, "patching", PATCHING_VERSION, params, steps, make_rows, recompute)


def _patch_rows(run, site, n_examples, seed):
    """Only the positions from z to the a1-predicting one are patched: before z the clean and
    corrupted runs are the same (causal attention, same tokens), and after the read position
    nothing reaches its logits, so patching there leaves the corrupted run as it is: exactly 0
    on the normalised scale, written without a forward pass. For the same reason the patched
    runs stop at the read position."""
    data = run.task_data
    n = min(n_examples, len(data.tokens))
    examples = np.sort(np.random.default_rng(seed).choice(len(data.tokens), n, replace=False))
    corr = z_corruption(data, examples)
    seq = corr.clean.shape[1]
    live = list(range(min(corr.z_positions), corr.pos + 1))

    def rows_at(step, model):
        metric = normalized_logit_diff(model, corr)
        result = torch.zeros(
            (model.cfg.n_layers, seq) + ((model.cfg.n_heads,) if site == "z" else ())
        )
        upto = slice(0, corr.pos + 1)  # causal: the tokens after the read position cannot matter
        result[:, live] = patch(
            model, corr.clean[:, upto], corr.corrupt[:, upto], site, metric, positions=live
        )
        rows = []
        for idx in np.ndindex(*result.shape):
            row = {"site": site, "layer": idx[0], "pos": idx[1]}
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
        return rows

    return rows_at


def task_patching_inputs(run, n_examples: int, seed: int):
    """Any task's patching inputs: (clean, corrupt, make_metric), the task's own corruption of a
    seeded subset of its evaluation examples, `make_metric(model)` its focus loss normalised
    (0: the corrupted run's, 1: the clean run's, read against the clean tokens)."""
    from selector_lens.model.evaluation import focus_loss
    from selector_lens.task.protocol import corrupted, focus

    task, es = run.config.task, run.eval_set()
    n = min(n_examples, len(es.tokens))
    examples = np.sort(np.random.default_rng(seed).choice(len(es.tokens), n, replace=False))
    clean, corrupt = es.tokens[examples], corrupted(task, es, seed)[examples]
    mask = focus(task, es)[examples]

    def make_metric(model):
        with torch.inference_mode():
            device = next(model.parameters()).device
            a = focus_loss(model(clean.to(device)), clean, mask).item()
            b = focus_loss(model(corrupt.to(device)), clean, mask).item()

        def metric(logits):
            return (b - focus_loss(logits, clean, mask)) / (b - a)

        metric.clean, metric.corrupt = a, b
        return metric

    return clean, corrupt, make_metric


def _task_patch_rows(run, site, n_examples, seed):
    """Any task's patching (`task_patching_inputs`). Head outputs (`z`) are patched at every
    position at once (`pos` -1); residual sites position by position."""
    clean, corrupt, make_metric = task_patching_inputs(run, n_examples, seed)

    def rows_at(step, model):
        metric = make_metric(model)
        positions = "all" if site == "z" else None
        result = patch(model, clean, corrupt, site, metric, positions=positions)
        rows = []
        for idx in np.ndindex(*result.shape):
            row = {"site": site, "layer": idx[0]}
            if site == "z":
                row["pos"], row["head"] = -1, idx[1]
            else:
                row["pos"] = idx[1]
            rows.append(
                {
                    **row,
                    "value": result[idx].item(),
                    "clean_loss": metric.clean,
                    "corrupt_loss": metric.corrupt,
                }
            )
        return rows

    return rows_at


GAP_VERSION = "1"


def corruption_gap(run, steps=None, n_examples: int = 512, seed: int = 0, recompute: bool = False):
    """Any task's Δ: per checkpoint, its focus loss on the clean evaluation examples and on its
    corrupted input (`corrupt`), both against the clean tokens, and their gap (nats): the
    selector's Δz generalised. Kept in the run's store."""
    from selector_lens.runs.store import per_checkpoint
    from selector_lens.task.protocol import require

    require(run.config.task, "corrupt")

    def make_rows():
        _, _, make_metric = task_patching_inputs(run, n_examples, seed)

        def rows_at(step, model):  # the focus losses patching normalises by
            metric = make_metric(model)
            return [{"clean_loss": metric.clean, "corrupt_loss": metric.corrupt,
                     "gap": metric.corrupt - metric.clean}]  # fmt: skip

        return rows_at

    params = {"n_examples": n_examples, "seed": seed}
    steps = run.steps if steps is None else steps
    return per_checkpoint(run, "corruption_gap", GAP_VERSION, params, steps, make_rows, recompute)
