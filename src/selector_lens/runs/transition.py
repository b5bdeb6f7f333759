"""Reading a loss curve: waiting time τ, plateau height, transition window.

Every τ says which definition it used: the first eval step at which the candidate loss is
below `threshold` x log K (docs/science.md section 3). The paper's code times the same curve
other ways too, named here so a study can set them beside ours: τ by the first-target loss
(`first_target_tau`), the width of the drop (`window_width`), and a direction's time to a
fraction of its initial first-target loss (`fraction_time`).
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
        "tau_first_target": first_target_tau(rows, log_k, threshold),
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


def power_law_fit(x, y, n_boot: int = 2000, ci: float = 0.95, seed: int = 0) -> dict:
    """Least-squares fit of log y = log C + α log x, with a bootstrap CI on α (resampling points).

    Returns α, C, R² (in log space), the CI, and the bootstrap draws of (α, log C) so a figure can
    draw the band. Needs at least two distinct x; the CI needs three points.
    """
    from selector_lens.errors import SelectorLensError

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) != len(y) or len(x) < 2 or len(np.unique(x)) < 2:
        raise SelectorLensError(
            f"a power-law fit needs at least two points with distinct x (got {len(x)})"
        )
    if (x <= 0).any() or (y <= 0).any():
        raise SelectorLensError("a power-law fit needs positive x and y")
    lx, ly = np.log(x), np.log(y)
    alpha, logc = np.polyfit(lx, ly, 1)
    resid = ly - (alpha * lx + logc)
    ss_tot = ((ly - ly.mean()) ** 2).sum()
    r2 = 1 - (resid**2).sum() / ss_tot if ss_tot > 0 else 1.0
    draws = []
    if len(x) >= 3:
        rng = np.random.default_rng(seed)
        for _ in range(n_boot):
            idx = rng.integers(0, len(x), len(x))
            if len(np.unique(lx[idx])) < 2:
                continue
            draws.append(np.polyfit(lx[idx], ly[idx], 1))
    draws = np.array(draws).reshape(-1, 2)
    lo, hi = (
        np.quantile(draws[:, 0], [(1 - ci) / 2, (1 + ci) / 2])
        if len(draws)
        else (math.nan, math.nan)
    )
    return {
        "alpha": float(alpha),
        "C": float(np.exp(logc)),
        "r2": float(r2),
        "ci": ci,
        "alpha_ci": (float(lo), float(hi)),
        "n": int(len(x)),
        "draws": draws,
    }


def exponent_difference(a: dict, b: dict, ci: float = 0.95) -> dict:
    """α(a) - α(b) for two `power_law_fit`s of independent data, with the interval of the
    difference of their bootstrap draws (paired by index: each pair is one joint resample)."""
    n = min(len(a["draws"]), len(b["draws"]))
    diff = a["draws"][:n, 0] - b["draws"][:n, 0]
    lo, hi = np.quantile(diff, [(1 - ci) / 2, (1 + ci) / 2]) if n else (math.nan, math.nan)
    return {
        "difference": a["alpha"] - b["alpha"],
        "ci": ci,
        "difference_ci": (float(lo), float(hi)),
    }


def scaling_fits(table) -> dict:
    """The paper's scaling analyses on a run table (`runs.run_table`), transitioned runs only.

    tau_vs_D: τ = C D^α across all runs; tau_vs_K: at each D (`nominal_d`) with two or more K,
    τ = C K^β;
    k_beyond_D: the slope of the τ-vs-D residuals (log) against log K (0: no K effect beyond D).
    """
    done = table[table.tau.notna()]
    out = {
        "n_runs": int(len(table)),
        "n_transitioned": int(len(done)),
        "tau_vs_D": None,
        "tau_vs_K": {},
        "k_beyond_D": None,
    }
    if done.D.nunique() >= 2:
        fit = power_law_fit(done.D, done.tau)
        out["tau_vs_D"] = {k: v for k, v in fit.items() if k != "draws"}
        if done.k.nunique() >= 2:
            resid = np.log(done.tau.astype(float)) - np.log(
                fit["C"] * done.D.astype(float) ** fit["alpha"]
            )
            out["k_beyond_D"] = float(np.polyfit(np.log(done.k.astype(float)), resid, 1)[0])
    for d, part in done.groupby(done.D.map(nominal_d)):
        if part.k.nunique() >= 2:
            fit = power_law_fit(part.k, part.tau)
            out["tau_vs_K"][int(d)] = {k: v for k, v in fit.items() if k != "draws"}
    return out


GROUPED_BY = ("direction", "z_length", "z_groups", "lr", "weight_decay", "batch_size")


def fit_groups(table) -> dict:
    """`scaling_fits` per group of runs that share every option but K, D and the seed (a
    `run_table`): a folder holding runs of several lr, batch sizes or directions would otherwise
    fit one law across their effects. {"varying": [options that differ], "groups": [{"options",
    "n_runs", "fits"}, ...]}."""
    varying = [c for c in GROUPED_BY if table[c].nunique(dropna=False) > 1]
    if not varying:
        return {
            "varying": [],
            "groups": [{"options": {}, "n_runs": len(table), "fits": scaling_fits(table)}],
        }
    groups = []
    for values, part in table.groupby(varying, sort=True, dropna=False):
        values = values if isinstance(values, tuple) else (values,)
        options = {k: (v.item() if hasattr(v, "item") else v) for k, v in zip(varying, values)}
        groups.append({"options": options, "n_runs": len(part), "fits": scaling_fits(part)})
    return {"varying": varying, "groups": groups}


def nominal_d(d: int) -> int:
    """The dataset size a fixed-D series means: n_bases = D / K rounds (K = 36 at D = 10,000 has
    278 bases, 10,008 examples), so a D within 1% of a two-significant-figure value is that value."""
    r = float(f"{d:.2g}")
    return int(r) if abs(d - r) <= 0.01 * r else int(d)


def solve_time(rows: list[dict], token_acc: float = 0.95) -> int | None:
    """First eval step with teacher-forced token accuracy (target tokens + EOS) >= `token_acc`.

    Defined the same way for every direction (the reverse ones have no candidates), so it is the
    waiting time of the directional comparison. On the bz_to_a plateau a1 is a 1-in-K guess, so
    the accuracy stays near 0.8 (4 of 5 tokens) until z is used.
    """
    for r in rows:
        if r["token_acc"] >= token_acc:
            return int(r["step"])
    return None


def first_below(rows: list[dict], key: str, level: float) -> int | None:
    """First eval step whose `key` is below `level` (None if never)."""
    for r in rows:
        if r.get(key) is not None and r[key] < level:
            return int(r["step"])
    return None


def group_crossing_steps(
    steps, group_acc: np.ndarray, level: float = 0.5, at_least: bool = False
) -> np.ndarray:
    """Per group, the first step with accuracy > `level` (>= with `at_least`; inf if never).
    group_acc: [steps, groups]."""
    acc = np.asarray(group_acc)
    above = acc >= level if at_least else acc > level
    first = np.where(above.any(0), above.argmax(0), -1)
    steps = np.asarray(steps, dtype=float)
    return np.where(first >= 0, steps[np.maximum(first, 0)], np.inf)


def collective_transition(
    rows: list[dict], k: int, tau_step: int | None, level: float = 0.5, at_least: bool = False
) -> dict:
    """Do the groups switch together (docs/science.md claim 3)? From the stored per-group accuracy.

    A group crosses at its first eval with candidate accuracy > `level`. Reports the fraction of
    groups crossed by τ/2, τ and 1.5τ, and the 10%-90% crossing window as a fraction of τ. The
    incremental alternative (groups learned one at a time through the run) would spread the
    crossings evenly from the start: a window of ~0.8 of the span up to the last crossing.
    """
    rows = [r for r in rows if r.get("group_correct") is not None]
    if not rows:
        return {"groups": 0}
    steps = [r["step"] for r in rows]
    acc = np.array([r["group_correct"] for r in rows], dtype=float) / k
    cross = group_crossing_steps(steps, acc, level, at_least)
    crossed = cross[np.isfinite(cross)]
    out = {
        "groups": int(acc.shape[1]),
        "never_crossed": int((~np.isfinite(cross)).sum()),
        "level": level,
        "solved_when": f"{'>=' if at_least else '>'} {level:g} of its K examples",
    }
    if tau_step:
        out.update(
            {
                f"crossed_by_{name}": float((cross <= f * tau_step).mean())
                for name, f in (("half_tau", 0.5), ("tau", 1.0), ("1.5_tau", 1.5))
            }
        )
    if len(crossed) >= 2:
        q10, q50, q90 = np.quantile(crossed, [0.1, 0.5, 0.9])
        out.update(
            {"crossing_q10": float(q10), "crossing_median": float(q50), "crossing_q90": float(q90)}
        )
        if tau_step:
            out["window_over_tau"] = float((q90 - q10) / tau_step)
        out["incremental_window_over_tau"] = (
            float(0.8 * crossed.max() / tau_step) if tau_step else None
        )
    return out


def first_target_tau(rows: list[dict], log_k: float, threshold: float = 0.5) -> int | None:
    """τ by the first-target loss: the first eval with it below `threshold` x log K (the paper
    code's fallback when a run has no candidate loss, and its τ in the head-nucleation figure)."""
    return first_below(rows, "first_target_loss", threshold * log_k) if log_k > 0 else None


def window_width(
    rows: list[dict], log_k: float, high: float = 0.95, low: float = 0.05, key="candidate_loss"
) -> dict:
    """The paper code's lr "τ" (`scripts/analyze_lr_sweep.py`): from the last eval with `key`
    above `high` x log K to the first below `low` x log K. A run that never gets below is
    censored: `end` and `width` None, `last_step` and `lowest` say how far it got."""
    rows = [r for r in rows if r.get(key) is not None]
    end = first_below(rows, key, low * log_k)
    before = [r for r in rows if end is None or r["step"] < end]
    above = [r["step"] for r in before if r[key] > high * log_k]
    start = above[-1] if above else None
    return {
        "start": start,
        "end": end,
        "width": end - start if end is not None and start is not None else None,
        "last_step": rows[-1]["step"] if rows else None,
        "lowest_over_log_k": min(r[key] for r in rows) / log_k if rows and log_k > 0 else None,
    }


def fraction_time(rows: list[dict], fraction: float, key: str = "first_target_loss") -> int | None:
    """The paper code's direction timing (`scripts/analyze_k_sweep.py`, fraction 0.1): the first
    eval with `key` below `fraction` x its value at the first eval (step 0)."""
    start = next((r[key] for r in rows if r.get(key) is not None), None)
    return None if start is None else first_below(rows, key, fraction * start)


def task_summary(task, rows: list[dict]) -> dict:
    """The end-of-run summary: the selector's (`summarize`: plateau height over log K, τ by both
    definitions); any other task's transition step (`Task.transition`) and its last row's
    metrics (`final_<metric>`)."""
    if hasattr(task, "log_k") and getattr(task, "name", None) == "selector":
        return summarize(rows, task.log_k)
    last = rows[-1] if rows else {}
    out = {"tau": task.transition(rows), "tau_definition": type(task).transition.__doc__ or ""}
    out["final_step"] = last.get("step")
    out.update({f"final_{m}": last.get(m) for m in task.metrics})
    return out
