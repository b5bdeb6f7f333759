"""Each claim's verdict as a pure function of its study's table (docs/science.md section 4).

A study measures and builds its table (`studies/`); the rule that turns that table into
"reproduced", "partly", "not reproduced" or "no result" lives here, one function per claim, with
the rule in its docstring, so it can be read and tested on its own (tests/test_verdicts.py).
"""

from __future__ import annotations

REPRODUCED, PARTLY, NOT_REPRODUCED, NO_RESULT = (
    "reproduced",
    "partly",
    "not reproduced",
    "no result",
)
VERDICTS = (REPRODUCED, PARTLY, NOT_REPRODUCED, NO_RESULT)


def _of(checks: list[bool]) -> str:
    """All checks hold: reproduced; some: partly; none: not reproduced."""
    n = sum(bool(c) for c in checks)
    return REPRODUCED if n == len(checks) else PARTLY if n else NOT_REPRODUCED


def marginal_first(rows: list[dict]) -> str:
    """Claim 1, per seed {tau, plateau_over_log_k, final_candidate_loss, log_k}. Checks: every
    plateau within 15% of log K; every run transitioned and ends below 0.1 log K. No run
    transitioned: no result."""
    if not any(r["tau"] for r in rows):
        return NO_RESULT
    heights = [r["plateau_over_log_k"] for r in rows if r["plateau_over_log_k"] is not None]
    flat = bool(heights) and all(abs(h - 1) <= 0.15 for h in heights)
    dropped = all(r["tau"] and r["final_candidate_loss"] < 0.1 * r["log_k"] for r in rows)
    return _of([flat, dropped])


def collective(rows: list[dict]) -> str:
    """Claim 3, per seed {tau, crossed_by_half_tau, window_over_tau}. Checks: at most 10% of the
    groups solved at τ/2 in every seed; the 10%→90% crossing window at most 0.5 τ in every seed.
    No transitioned run with a window: no result."""
    done = [r for r in rows if r["tau"]]
    windows = [r.get("window_over_tau") for r in done if r.get("window_over_tau") is not None]
    if not done or not windows:
        return NO_RESULT
    return _of([max(r.get("crossed_by_half_tau") for r in done) <= 0.1, max(windows) <= 0.5])


def cascade(rows: list[dict]) -> str:
    """Claim 7, per seed {tau, dz_lead_frac, mean_ablation_delta: {post}, best_alone_candidate_loss,
    log_k}. Checks: Δz leads τ by more than 0.1 τ in every seed (and at least one lead is known);
    mean-ablating the routing head at post costs at least 1 nat of candidate loss in every seed;
    no head kept alone gets below 0.5 log K. No transitioned run: no result."""
    done = [r for r in rows if r["tau"]]
    if not done:
        return NO_RESULT
    leads = [r["dz_lead_frac"] for r in done if r["dz_lead_frac"] is not None]
    return _of(
        [
            bool(leads) and all(x > 0.1 for x in leads),
            all(r["mean_ablation_delta"]["post"] >= 1.0 for r in done),
            all(r["best_alone_candidate_loss"] > 0.5 * r["log_k"] for r in done),
        ]
    )


def geometry(plateau: list[dict]) -> str:
    """Claim 5, per plateau checkpoint (pre and mid) {lambda_min, ratio, noise_share_top}. Checks:
    λmin < 0 everywhere (a saddle); λmax / |λmin| >= 100 everywhere; at least half the gradient
    noise on the top curvature directions everywhere. No plateau checkpoint: no result."""
    if not plateau:
        return NO_RESULT
    return _of(
        [
            all(r["lambda_min"] < 0 for r in plateau),
            all(r["ratio"] >= 100 for r in plateau),
            all(r["noise_share_top"] >= 0.5 for r in plateau),
        ]
    )


def parity(rows: list[dict], head: str = "L0H3") -> str:
    """Claim 7 on the paper's own run, per checkpoint {kind, top: [(label, Δ loss), ...]}: the
    parity run's most damaging head after its first checkpoint is the paper's (L0H3) at every
    one (reproduced), at some (partly), at none (not reproduced)."""
    hits = [r["top"][0][0] == head for r in rows if r["kind"] == "parity"][1:]
    return REPRODUCED if hits and all(hits) else PARTLY if any(hits) else NOT_REPRODUCED


def scaling(fits: dict) -> str:
    """Claim 2 from `transition.scaling_fits`: reproduced when the α_D interval overlaps the
    paper's [1.14, 1.31] and every τ-vs-K exponent's interval overlaps [-0.2, 0.2] (flat in K);
    partly when τ grows with D (α_D > 0.5) or K is flat; fewer than two transitioned runs in D:
    no result."""
    f, kf = fits.get("tau_vs_D"), list(fits.get("tau_vs_K", {}).values())
    if not f:
        return NO_RESULT
    lo, hi = f["alpha_ci"]
    in_d = lo <= 1.31 and hi >= 1.14
    flat_k = bool(kf) and all(k["alpha_ci"][0] <= 0.2 and k["alpha_ci"][1] >= -0.2 for k in kf)
    return (
        REPRODUCED
        if in_d and flat_k
        else PARTLY
        if (f["alpha"] > 0.5 or flat_k)
        else NOT_REPRODUCED
    )


def noise(subclaims: dict[str, bool], lr_escaped: int, batch_escaped: int) -> str:
    """Claim 4 from its sub-claims (τ grows monotonically with lr, by more than 1.5x; the highest
    lr never escapes; smaller batches delay escape by more than 1.2x at equal examples): all
    hold, some, none. Fewer than two escaped runs in both the lr and the batch sweep: no
    result."""
    if lr_escaped < 2 and batch_escaped < 2:
        return NO_RESULT
    return _of(list(subclaims.values()))


# --- claim 8: the seven alternatives the paper rules out, each a sub-claim ----------------------
# "reproduced" means our measurement rules the alternative out too.


def cancellation(gamma: float | None, ci: list | None, slower_never_escapes: bool) -> str:
    """Gradient cancellation across the groups sharing a z predicts τ about linear in the number
    of super-groups G (τ ∝ G^γ, γ ~ 1; the paper: γ ~ 0.02). γ's interval below 0.5: reproduced;
    above 0.5, or a run with more groups never escaping while G = 1 does: not reproduced; else
    (an interval across 0.5, or two points) partly. No fit: no result."""
    if slower_never_escapes:
        return NOT_REPRODUCED
    if gamma is None:
        return NO_RESULT
    if ci is None:
        return PARTLY if gamma < 0.5 else NOT_REPRODUCED
    lo, hi = ci
    return REPRODUCED if hi < 0.5 else NOT_REPRODUCED if lo > 0.5 else PARTLY


def barrier_crossing(noise_verdict: str, more_noise_slows: bool) -> str:
    """Noise-driven barrier crossing (Kramers) predicts more noise escapes sooner. The highest lr
    escaping later than lr 1e-3, or never: reproduced; otherwise not reproduced. Claim 4 without
    a result: no result."""
    if noise_verdict == NO_RESULT:
        return NO_RESULT
    return REPRODUCED if more_noise_slows else NOT_REPRODUCED


def incremental(collective_verdict: str) -> str:
    """Incremental group-by-group coverage is ruled out as far as claim 3 (collective
    transition) holds: its verdict, unchanged."""
    return collective_verdict


def spinodal(plateau: list[dict]) -> str:
    """A spinodal (a minimum that turns unstable) predicts λmin >= 0 early on the plateau, turning
    negative near τ. λmin < 0 at every plateau checkpoint (pre and mid): reproduced; λmin >= 0 at
    every pre and < 0 at a mid: not reproduced; else partly. No plateau checkpoint: no result."""
    if not plateau:
        return NO_RESULT
    if all(r["lambda_min"] < 0 for r in plateau):
        return REPRODUCED
    pre = [r for r in plateau if r["phase"] == "pre"]
    mid = [r for r in plateau if r["phase"] == "mid"]
    if pre and all(r["lambda_min"] >= 0 for r in pre) and any(r["lambda_min"] < 0 for r in mid):
        return NOT_REPRODUCED
    return PARTLY


def adamw_timescale(rho: float | None, n: int) -> str:
    """If weight decay set the plateau, τ would grow with AdamW's timescale B / (η λ D) across the
    sweeps' runs (the paper: anti-correlated). Spearman ρ <= -0.3: reproduced; >= 0.3: not
    reproduced; between: partly. Fewer than 4 transitioned runs: no result."""
    if rho is None or n < 4:
        return NO_RESULT
    return REPRODUCED if rho <= -0.3 else NOT_REPRODUCED if rho >= 0.3 else PARTLY


def neural_collapse(within_ratio: float | None) -> str:
    """Collapse onto the marginal predicts the within-base variance of the last layer's
    a1-predicting residual shrinking across the transition (the paper: up 1.15x at K = 20).
    Post / pre ratio (the smallest over the runs measured) >= 1: reproduced; <= 0.8: not
    reproduced; between: partly. No run with both phases: no result."""
    if within_ratio is None:
        return NO_RESULT
    return REPRODUCED if within_ratio >= 1 else NOT_REPRODUCED if within_ratio <= 0.8 else PARTLY


def weight_norm_peak(drawdown: float | None) -> str:
    """A deep-grokking style mechanism predicts the total weight norm peaking, then falling, around
    the transition (the paper: it grows monotonically). Its largest fall below its running
    maximum, as a fraction of it: under 2%: reproduced; over 5%: not reproduced; between:
    partly. No trajectory: no result."""
    if drawdown is None:
        return NO_RESULT
    return REPRODUCED if drawdown < 0.02 else NOT_REPRODUCED if drawdown > 0.05 else PARTLY


def falsified(sub_verdicts: list[str]) -> str:
    """Claim 8 from its sub-claims (one per alternative): every one reproduced: reproduced; none
    measured: no result; every measured one not reproduced: not reproduced; else partly (some
    ruled out, or some not measured yet)."""
    measured = [v for v in sub_verdicts if v != NO_RESULT]
    if not measured:
        return NO_RESULT
    if len(measured) == len(sub_verdicts) and all(v == REPRODUCED for v in measured):
        return REPRODUCED
    if all(v == NOT_REPRODUCED for v in measured):
        return NOT_REPRODUCED
    return PARTLY


def asymmetry(mean_ratio: float | None) -> str:
    """Claim 6 from the mean over seeds of a_to_b / bz_to_a waiting time: within the paper's
    1.7-4.4: reproduced; above 1.1 (reverse slower, by less or more): partly; else not
    reproduced. No seed solved in both directions: no result."""
    if mean_ratio is None:
        return NO_RESULT
    return (
        REPRODUCED if 1.7 <= mean_ratio <= 4.4 else PARTLY if mean_ratio > 1.1 else NOT_REPRODUCED
    )
