"""Representation statistics across checkpoints: the neural-collapse test.

At the a1-predicting position, per layer (the embedding, then each block's `resid_post`), the
residual stream of the evaluation set splits into a within-base part (how far a base's K
examples, which differ only in z, sit from their base's mean) and a between-base part (how far
the base means sit from the grand mean). Collapse onto the marginal would shrink the within-base
variance; the paper reports the opposite at K = 20 (within-base up 1.15x, between-base down 0.61x
across the transition).
"""

from __future__ import annotations

from jaxtyping import Float

from selector_lens.errors import SelectorLensError
from selector_lens.lazy import lazy_module

torch = lazy_module("torch")  # imported on first use: a stored table needs no torch

REPRESENTATIONS_VERSION = "1"  # bump when the numbers change: stored tables are then recomputed


def variance_split(x: Float[torch.Tensor, "groups k d_model"]) -> tuple[float, float]:
    """(within, between): the mean squared distance of each vector to its group's mean, and of
    the group means to the grand mean, summed over dimensions (so within + between is the total
    variance when the groups have equal size)."""
    x = x.double()
    means = x.mean(1)  # [groups, d_model]
    within = (x - means[:, None]).pow(2).sum(-1).mean()
    between = (means - x.mean((0, 1))).pow(2).sum(-1).mean()
    return float(within), float(between)


def representation_stats(run, steps=None, recompute: bool = False):
    """Rows {step, layer, within, between, ratio = within / between} per step in layer order
    (layer 0 = the embedding), on the run's evaluation set (whole groups). Kept in the run's
    analysis store (`recompute=True` bypasses it)."""
    from selector_lens.runs.store import per_checkpoint

    task = run.config.task
    if task.k < 2:
        raise SelectorLensError(f"{run.path} has K = {task.k}: no within-base variance to measure")
    params = {"position": "a1-predicting", "eval_set": "the run's recorded groups"}
    return per_checkpoint(
        run,
        "representations",
        REPRESENTATIONS_VERSION,
        params,
        steps,
        lambda: _stats_rows(run),
        recompute,
    )


def _stats_rows(run):
    """Within- and between-base variance per layer at one checkpoint."""
    from selector_lens.analysis.lens import a1_resid_stack

    task = run.config.task
    es = run.eval_set()  # group-major: example g * K + i
    pos = task.first_target_pos

    @torch.inference_mode()
    def rows_at(step, model):
        rows = []
        for layer, x in enumerate(a1_resid_stack(model, es.tokens, pos)):
            within, between = variance_split(x.view(-1, task.k, x.shape[-1]))
            ratio = within / between if between > 0 else None
            rows.append({"layer": layer, "within": within, "between": between, "ratio": ratio})
        return rows

    return rows_at
