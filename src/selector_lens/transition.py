"""Reading a loss curve: waiting time τ, plateau height, transition window.

Every τ says which definition it used: the first eval step at which the candidate loss is
below `threshold` x log K (science.md section 3).
"""

from __future__ import annotations

import math

import numpy as np


def tau(steps, candidate_loss, log_k: float, threshold: float = 0.5) -> int | None:
    """First step with candidate loss < threshold * log K; None if the run never gets there."""
    if log_k <= 0:
        return None  # K = 1: nothing to disambiguate
    steps, values = np.asarray(steps), np.asarray(candidate_loss, dtype=float)
    hit = np.nonzero(values < threshold * log_k)[0]
    return int(steps[hit[0]]) if len(hit) else None


def plateau_height(steps, candidate_loss, tau_step: int | None) -> float:
    """Median candidate loss over the middle of the plateau: steps in [τ/4, 3τ/4].

    Without a transition, over the second half of the run. NaN if the window is empty.
    """
    steps, values = np.asarray(steps), np.asarray(candidate_loss, dtype=float)
    if tau_step is None:
        lo, hi = steps.max() / 2 if len(steps) else 0, math.inf
    else:
        lo, hi = tau_step / 4, 3 * tau_step / 4
    window = values[(steps >= lo) & (steps <= hi)]
    return float(np.median(window)) if len(window) else math.nan


def summarize(rows: list[dict], log_k: float, threshold: float = 0.5) -> dict:
    """The end-of-run summary: plateau height / log K, τ, final accuracies, last losses."""
    cand = [r for r in rows if r.get("candidate_loss") is not None]
    steps = [r["step"] for r in cand]
    values = [r["candidate_loss"] for r in cand]
    t = tau(steps, values, log_k, threshold) if cand else None
    height = plateau_height(steps, values, t) if cand else math.nan
    last = rows[-1] if rows else {}
    return {
        "tau": t,
        "tau_definition": f"first eval step with candidate_loss < {threshold} * log K",
        "plateau_height": None if math.isnan(height) else height,
        "plateau_over_log_k": None if math.isnan(height) or log_k <= 0 else height / log_k,
        "log_k": log_k,
        "final_step": last.get("step"),
        "final_loss": last.get("loss"),
        "final_candidate_loss": last.get("candidate_loss"),
        "final_candidate_acc": last.get("candidate_acc"),
        "final_dz": last.get("dz"),
    }
