"""Attribution patching (Nanda 2023): activation patching's linear estimate, from one clean
forward, one corrupted forward and one backward per batch, whatever the number of heads.

Patching an activation from the clean run into the corrupted one changes a metric M by about
(a_clean - a_corrupt) . dM/da, the gradient taken on the corrupted run (TransformerLens 3.9's
`tools.analysis.attribution_patching` computes the same per example, for the bridge; this one
takes a whole batch in one pass, and a test holds the two equal). Summed over the examples
(the exact patch replaces the activation in every example of the batch at once) and over the
head's dimensions, that is one number per layer, position and head, on the same scale as
`patching.patch` (TransformerLens's conventions) with the same metrics: the selector's normalised
logit difference under the z corruption, another task's normalised focus loss under its own
corruption. The estimate is exact where M is linear in the activation (the last block's heads of
a model without LayerNorm, under a logit difference) and fails where attention saturates: its
softmax is flat to first order there.
"""

from __future__ import annotations

import time

import numpy as np
from jaxtyping import Float, Int

from selector_lens.errors import SelectorLensError
from selector_lens.lazy import lazy_module

torch = lazy_module("torch")  # imported on first use: a stored table needs no torch

SITES = {"z": "attn.hook_z", "resid_pre": "hook_resid_pre"}


def attribute(
    model,
    clean_tokens: Int[torch.Tensor, "batch seq"],
    corrupt_tokens: Int[torch.Tensor, "batch seq"],
    metric,
    site: str = "z",
) -> Float[torch.Tensor, "layer pos ..."]:
    """The linear estimate of patching each (layer, position[, head]) activation at `site` from
    the clean run into the corrupted one: [layer, pos, head] for `z`, [layer, pos] for
    `resid_pre`. `metric(logits)` -> a scalar tensor, as `patching.patch` takes it."""
    if site not in SITES:
        raise SelectorLensError(f"unknown site {site!r}; choose one of {', '.join(SITES)}")
    names = [f"blocks.{layer}.{SITES[site]}" for layer in range(model.cfg.n_layers)]
    with torch.inference_mode():
        _, cache = model.run_with_cache(clean_tokens, names_filter=lambda n: n in names)
        clean = [cache[n].clone() for n in names]
    kept = {}

    def keep(act, hook):
        kept[hook.name] = act
        return act

    with torch.enable_grad():
        logits = model.run_with_hooks(corrupt_tokens, fwd_hooks=[(n, keep) for n in names])
        # the gradient onto the activations alone: no parameter's .grad is computed or touched
        grads = torch.autograd.grad(metric(logits), [kept[n] for n in names], allow_unused=True)
    out = []
    for name, a_clean, grad in zip(names, clean, grads):
        act = kept[name].detach()
        grad = torch.zeros_like(act) if grad is None else grad  # a layer the metric never reads
        out.append(((a_clean - act) * grad).sum(0).sum(-1))  # [pos, (head)]
    return torch.stack(out).detach()


ATTRIBUTION_VERSION = "1"


def attribution_series(
    run, site: str = "z", steps=None, n_examples: int = 200, seed: int = 0, recompute=False
):
    """`attribute` at each checkpoint with the metric and corruption `patching.patch_series`
    uses on the same examples: a tidy DataFrame step x layer x pos (x head) of `estimate`, with
    the seconds each checkpoint took. Kept in the run's store."""
    from selector_lens.runs.store import per_checkpoint

    if site not in SITES:
        raise SelectorLensError(f"unknown site {site!r}; choose one of {', '.join(SITES)}")
    params = {"site": site, "n_examples": n_examples, "seed": seed}
    return per_checkpoint(
        run,
        "attribution",
        ATTRIBUTION_VERSION,
        params,
        run.steps if steps is None else steps,
        lambda: _rows(run, site, n_examples, seed),
        recompute,
    )


def patching_inputs(run, n_examples: int, seed: int):
    """(clean, corrupt, make_metric) of `patch_series`'s examples: `make_metric(model)` is its
    normalised metric at that checkpoint (0: the corrupted run, 1: the clean run)."""
    task = run.config.task
    if task.name == "selector":
        from selector_lens.analysis.patching import (
            check_corruptible,
            normalized_logit_diff,
            z_corruption,
        )

        check_corruptible(task)
        data = run.task_data
        n = min(n_examples, len(data.tokens))
        examples = np.sort(np.random.default_rng(seed).choice(len(data.tokens), n, replace=False))
        corr = z_corruption(data, examples)
        upto = corr.pos + 1  # causal: the tokens after the read position cannot matter
        return (
            corr.clean[:, :upto],
            corr.corrupt[:, :upto],
            lambda model: normalized_logit_diff(model, corr),
        )
    from selector_lens.analysis.patching import task_patching_inputs

    return task_patching_inputs(run, n_examples, seed)


def _rows(run, site, n_examples, seed):
    clean, corrupt, make_metric = patching_inputs(run, n_examples, seed)

    def rows_at(step, model):
        t = time.perf_counter()
        result = attribute(model, clean, corrupt, make_metric(model), site)
        seconds = time.perf_counter() - t
        rows = []
        for idx in np.ndindex(*result.shape):
            row = {"site": site, "layer": idx[0], "pos": idx[1]}
            if site == "z":
                row["head"] = idx[2]
            rows.append({**row, "estimate": result[idx].item(), "seconds": seconds})
        return rows

    return rows_at


def compare(run, steps=None, n_examples: int = 200, seed: int = 0, recompute=True) -> dict:
    """Attribution against exact patching of every head's output (`patch_series`, site z) on the
    same checkpoints and examples: per checkpoint the Pearson correlation and the largest gap,
    overall the correlation, and the seconds each took. Exact patching of another task patches
    a head at every position at once, so the estimate is summed over positions there. Both
    are computed afresh by default (`recompute`), so the times compare."""
    import pandas as pd

    from selector_lens.analysis.patching import patch_series

    steps = run.steps if steps is None else list(steps)
    t = time.perf_counter()
    exact = patch_series(run, "z", steps, n_examples, seed, recompute)
    t_exact = time.perf_counter() - t
    t = time.perf_counter()
    est = attribution_series(run, "z", steps, n_examples, seed, recompute)
    t_est = time.perf_counter() - t
    if (exact.pos == -1).all():  # every position at once: the estimate's sum over positions
        est = est.groupby(["step", "layer", "head"], as_index=False).estimate.sum()
        keys = ["step", "layer", "head"]
    else:
        keys = ["step", "layer", "pos", "head"]
    both = exact.merge(est, on=keys)
    per_step = []
    for step, part in both.groupby("step"):
        r = _pearson(part.value, part.estimate)
        per_step.append(
            {
                "step": int(step),
                "correlation": r,
                "max_gap": float((part.value - part.estimate).abs().max()),
                "largest_exact": float(part.value.abs().max()),
            }
        )
    return {
        "per_step": per_step,
        "correlation": _pearson(both.value, both.estimate),
        "pairs": len(both),
        "seconds_exact": t_exact,
        "seconds_attribution": t_est,
        "table": pd.DataFrame(both),
    }


def _pearson(a, b) -> float | None:
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 2 or a.std() == 0 or b.std() == 0:
        return None
    return float(np.corrcoef(a, b)[0, 1])


attribution_patch = attribution_series  # the name the field knows it by
