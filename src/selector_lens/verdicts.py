"""Each claim's verdict as a pure function of its study's table (docs/science.md section 4).

A study measures and builds its table (`studies.py`); the rule that turns that table into
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


def falsified(collective_verdict: str, noise_verdict: str, more_noise_slows: bool) -> str:
    """Claim 8 from claims 3 and 4: incremental coverage is ruled out when claim 3 is reproduced
    (argued against when partly); noise-driven barrier crossing is ruled out when the highest lr
    escapes later than lr 1e-3 or never. Both: reproduced; either (or claim 3 partly): partly;
    no evidence either way while a claim has no result: no result."""
    against_incremental = collective_verdict in (REPRODUCED, PARTLY)
    if NO_RESULT in (collective_verdict, noise_verdict) and not (
        against_incremental or more_noise_slows
    ):
        return NO_RESULT
    if collective_verdict == REPRODUCED and more_noise_slows:
        return REPRODUCED
    return PARTLY if against_incremental or more_noise_slows else NOT_REPRODUCED


def asymmetry(mean_ratio: float | None) -> str:
    """Claim 6 from the mean over seeds of a_to_b / bz_to_a waiting time: within the paper's
    1.7-4.4: reproduced; above 1.1 (reverse slower, by less or more): partly; else not
    reproduced. No seed solved in both directions: no result."""
    if mean_ratio is None:
        return NO_RESULT
    return (
        REPRODUCED if 1.7 <= mean_ratio <= 4.4 else PARTLY if mean_ratio > 1.1 else NOT_REPRODUCED
    )
