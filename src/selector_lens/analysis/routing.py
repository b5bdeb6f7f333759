"""The internal cascade (docs/science.md claim 7): which head routes z, and when each signal moves.

The routing head is found, never assumed: the head whose mean ablation raises the candidate
loss most after the transition, cross-checked against attention to z at the same step.
"""

from __future__ import annotations

import numpy as np

from selector_lens.analysis.ablation import ablate_each_head, head_label
from selector_lens.errors import SelectorLensError


def find_routing_head(
    run, step: int | None = None, mode: str = "mean", sufficiency: bool = True
) -> dict:
    """Ablate every head at `step` (default: the `post` phase) and name the routing head."""
    if not run.config.task.has_z:
        raise SelectorLensError(
            f"{run.path} is a {run.config.task.direction} run: it has no z to route"
        )
    if step is None:
        step = run.phases()["post"]
    run.check_step(step)
    necessity = ablate_each_head(run, [step], mode)
    head, best = most_necessary_head(necessity)
    attn = np.array(_stored_row(run, step)["attn_to_z"])
    top_attn = tuple(int(i) for i in np.unravel_index(attn.argmax(), attn.shape))
    out = {
        "step": step,
        "mode": mode,
        "routing_head": head,
        "label": head_label(*head),
        "delta_candidate_loss": float(best.delta_candidate_loss),
        "attn_to_z": float(attn[head]),
        "top_attention_head": head_label(*top_attn),
        "attention_agrees": top_attn == head,
        "necessity": necessity,
    }
    if sufficiency:
        suff = ablate_each_head(run, [step], mode, keep_only=True)
        alone = suff.loc[suff.ablated_candidate_loss.idxmin()]
        out["sufficiency"] = suff
        out["best_sufficient_head"] = head_label(int(alone["layer"]), int(alone["head"]))
        out["best_sufficient_candidate_loss"] = float(alone.ablated_candidate_loss)
    return out


def most_necessary_head(necessity):
    """(layer, head) and row of the largest candidate-loss increase in an `ablate_each_head` table."""
    best = necessity.loc[necessity.delta_candidate_loss.idxmax()]
    return (int(best["layer"]), int(best["head"])), best


def _stored_row(run, step: int) -> dict:
    """The metrics row of `step`, or of the nearest eval step."""
    rows = run.metric_rows()
    return min(rows, key=lambda r: abs(r["step"] - step))


ONSET_HOLD = 3  # evals in a row at or above the line: a rise that holds, not one noisy eval


def onset(steps, values, threshold: float, hold: int = ONSET_HOLD) -> int | None:
    """First step from which `values` stays at or above `threshold` for `hold` evals in a row
    (fewer at the end of the log if every one left is above); None if it never does."""
    above = np.asarray(values, dtype=float) >= threshold
    for i in np.nonzero(above)[0]:
        if above[i : i + hold].all():
            return int(np.asarray(steps)[i])
    return None


def cascade(
    run, head=None, dz_threshold: float = 0.1, tau_threshold: float = 0.5, mode: str = "mean"
) -> dict:
    """Onsets of the routing head's attention to z, of Δz, and of the loss drop τ, and the lead
    of each over τ as a fraction of τ (paper: Δz leads by ~0.5 τ).

    Attention onset: first eval from which the head's attention to z stays risen halfway from its
    step-0 value to its maximum over the run; Δz onset: from which Δz stays above
    `dz_threshold` (`onset`: for ONSET_HOLD evals in a row, so one noisy eval is no onset).
    """
    found = None
    if head is None:
        found = find_routing_head(run, mode=mode, sufficiency=False)
        head = found["routing_head"]
    layer, h = head
    rows = run.metric_rows()
    steps = [r["step"] for r in rows]
    attn = [r["attn_to_z"][layer][h] for r in rows]
    tau = run.tau(tau_threshold)
    a0, amax = attn[0], max(attn)
    attn_on = onset(steps, attn, a0 + 0.5 * (amax - a0))
    dz_on = onset(steps, [r["dz"] for r in rows], dz_threshold)

    def lead(s):
        return None if s is None or not tau else (tau - s) / tau

    out = {
        "routing_head": head_label(layer, h),
        "tau": tau,
        "tau_definition": f"first eval step with candidate_loss < {tau_threshold} * log K",
        "attn_onset": attn_on,
        "attn_onset_definition": "first eval from which attention to z stays >= halfway from its "
        f"step-0 value to its max for {ONSET_HOLD} evals",
        "dz_onset": dz_on,
        "dz_threshold": dz_threshold,
        "attn_lead_frac": lead(attn_on),
        "dz_lead_frac": lead(dz_on),
    }
    if found is not None:
        out["routing"] = {k: v for k, v in found.items() if k not in ("necessity", "sufficiency")}
    return out
