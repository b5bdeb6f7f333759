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


def _of(checks: list[bool | None]) -> str:
    """Each check holds (True), fails (False) or cannot be told apart from its tolerance (None).
    All hold: reproduced; none holds and one fails: not reproduced; else partly."""
    if all(c is True for c in checks):
        return REPRODUCED
    if not any(c is True for c in checks) and any(c is False for c in checks):
        return NOT_REPRODUCED
    return PARTLY


def inside(interval, lo: float, hi: float) -> bool | None:
    """An interval against a tolerance [lo, hi]: within it (True), clear of it (False), or
    across an edge (None: the data cannot tell)."""
    a, b = interval
    if lo <= a and b <= hi:
        return True
    if b < lo or a > hi:
        return False
    return None


def every(checks: list[bool | None]) -> bool | None:
    """One check over several cases (seeds, K, checkpoints): every case holds (True), one fails
    (False), else None. No case: None."""
    if not checks:
        return None
    if any(c is False for c in checks):
        return False
    return True if all(c is True for c in checks) else None


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


def lead(frac: float | None) -> bool | None:
    """Does Δz lead? By more than 0.1 τ: yes; at or after the onset it is timed against (<= 0):
    no; a lead under 0.1 τ, or none known: cannot tell."""
    if frac is None:
        return None
    return True if frac > 0.1 else False if frac <= 0 else None


def cascade(rows: list[dict], lead_key: str = "paper_lead_frac") -> str:
    """Claim 7, per seed {tau, <lead_key>, mean_ablation_delta: {post}, best_alone_candidate_loss,
    log_k}. Checks: Δz leads (`lead`; the paper's: its onset, Δz > 0.1, before the first-target
    onset, first-target loss < 0.9 log K) in every seed; mean-ablating the routing head at post
    costs at least 1 nat of candidate loss in every seed; no head kept alone gets below 0.5 log K.
    No transitioned run: no result."""
    done = [r for r in rows if r["tau"]]
    if not done:
        return NO_RESULT
    return _of(
        [
            every([lead(r.get(lead_key)) for r in done]),
            all(r["mean_ablation_delta"]["post"] >= 1.0 for r in done),
            all(r["best_alone_candidate_loss"] > 0.5 * r["log_k"] for r in done),
        ]
    )


ARTEFACT = "the paper's estimator gives ratios >= 100, each where its stop fired at once"


def _all_or_none(values: list[bool]) -> bool | None:
    """True where every case holds, False where none does, None for a mix or no case."""
    if not values:
        return None
    return True if all(values) else False if not any(values) else None


def geometry_subclaims(plateau: list[dict], compared: list[dict]) -> dict[str, bool | None]:
    """Claim 5's sub-claims. `plateau`: Lanczos rows at pre and mid {lambda_min, ratio,
    noise_share_top}; `compared`: both estimators on the same checkpoints and examples
    {lanczos_ratio, lanczos_lambda_min, shifted_ratio, shifted_lambda_min, shifted_iters}.
    - a saddle: Lanczos's λmin (an upper bound on the true one) < 0 at every checkpoint;
    - anisotropic by a converged estimator: λmax / |λmin| >= 100 (Lanczos);
    - noise along the top curvature directions: at least half of it;
    - the paper's estimator reproduced and explained (`ARTEFACT`): at some checkpoint it
      gives a ratio >= 100, and wherever it does, its stop fired within 12 products with |λmin|
      under a tenth of Lanczos's (yes); no ratio >= 100 from it, or one where it ran on or
      agrees with Lanczos (no: then the paper's number is not reproduced, or it is real).
    A mix across checkpoints in the first three: None. No comparison: None."""
    out = {
        "a saddle (λmin < 0)": _all_or_none([r["lambda_min"] < 0 for r in plateau]),
        "λmax / |λmin| >= 100 by Lanczos": _all_or_none([r["ratio"] >= 100 for r in plateau]),
        "noise mostly on the top directions": _all_or_none(
            [r["noise_share_top"] >= 0.5 for r in plateau]
        ),
    }
    large = [c for c in compared if c["shifted_ratio"] >= 100]
    out[ARTEFACT] = (
        None
        if not compared
        else bool(large)
        and all(
            c["shifted_iters"] <= 12
            and abs(c["shifted_lambda_min"]) < 0.1 * abs(c["lanczos_lambda_min"])
            for c in large
        )
    )
    return out


def geometry(subclaims: dict[str, bool | None]) -> str:
    """Claim 5 from `geometry_subclaims`: the saddle, the anisotropy by a converged estimator and
    the noise (the paper's estimator is reported beside them, not judged as the claim). No
    plateau checkpoint (every sub-claim None): no result."""
    judged = [v for k, v in subclaims.items() if k != ARTEFACT]
    if all(v is None for v in judged):
        return NO_RESULT
    return _of(judged)


def parity(rows: list[dict], head: str = "L0H3") -> str:
    """Claim 7 on the paper's own run, per checkpoint {kind, top: [(label, Δ loss), ...]}: the
    parity run's most damaging head after its first checkpoint is the paper's (L0H3) at every
    one (reproduced), at some (partly), at none (not reproduced)."""
    hits = [r["top"][0][0] == head for r in rows if r["kind"] == "parity"][1:]
    return REPRODUCED if hits and all(hits) else PARTLY if any(hits) else NOT_REPRODUCED


ALPHA_TOLERANCE = 0.15  # |α_ours - α_paper|: the paper's own K = 36 τ moved 28% between series
FLAT_K_TOLERANCE = 0.2  # |β_K|: τ changes by < 1.6x over K = 3..36 at fixed D


def scaling(difference_ci, k_cis: list) -> str:
    """Claim 2 from the bootstrap interval of α_D(ours) - α_D(paper's published points) and the
    intervals of the τ-vs-K exponents at fixed D. Checks (`inside`): the difference within
    ±ALPHA_TOLERANCE; every β_K within ±FLAT_K_TOLERANCE. No α_D: no result."""
    if difference_ci is None:
        return NO_RESULT
    d = inside(difference_ci, -ALPHA_TOLERANCE, ALPHA_TOLERANCE)
    flat = every([inside(ci, -FLAT_K_TOLERANCE, FLAT_K_TOLERANCE) for ci in k_cis])
    return _of([d, flat])


def monotone(
    taus: list[float | None], scatter: float, at_least: list[float | None] | None = None
) -> bool | None:
    """Do the times grow with the swept value (in its order), up to the seed-to-seed scatter
    (`scatter` >= 1: max / min of τ over seeds at one point)? A step down by more than the
    scatter: no; no such step, and the last over the first beyond the scatter: yes; else (the
    whole change within the scatter) None. Fewer than two points, or one with neither a time nor
    a bound: None.

    `at_least[i]`: where point i's time is None (censored: not reached by the run's end), the
    lower bound that end gives. A bound can prove a rise (the last point's bound over the first
    time beyond the scatter) or a step down after it (a later time below the bound by more than
    the scatter); nothing can step down into it, since its time may be anything above."""
    bounds = list(at_least) if at_least is not None else [None] * len(taus)
    low = [t if t else b for t, b in zip(taus, bounds)]  # each point's time, or its bound
    if len(taus) < 2 or any(not x for x in low):
        return None
    if any(b and b / a < 1 / scatter for a, b in zip(low, taus[1:])):
        return False
    return True if taus[0] and low[-1] / taus[0] > scatter else None


def ratio_beyond(ratio: float | None, threshold: float, scatter: float) -> bool | None:
    """A ratio against the paper's effect size: above `threshold` and beyond the scatter: yes;
    below both (no effect larger than the scatter): no; between: None; not measured: None."""
    if ratio is None:
        return None
    if ratio > max(threshold, scatter):
        return True
    return False if ratio < min(threshold, scatter) else None


def noise(subclaims: dict[str, bool | None], lr_escaped: int, batch_escaped: int) -> str:
    """Claim 4 from its sub-claims (τ grows monotonically with lr beyond the seed scatter; the
    highest lr never escapes; smaller batches delay escape beyond the scatter): `_of`. Fewer than
    two escaped runs in both the lr and the batch sweep: no result."""
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


DERIVED = ("AdamW timescale",)  # sub-claims that follow from others: reported, not counted


def adamw_timescale(rho: float | None, n: int) -> str:
    """If weight decay set the plateau, τ would grow with AdamW's timescale B / (η λ D) across the
    sweeps' runs (the paper: anti-correlated). Spearman ρ <= -0.3: reproduced; >= 0.3: not
    reproduced; between: partly. Fewer than 4 transitioned runs: no result. Not an independent
    test: B / (η λ D) falls with D and η, and claims 2 and 4 say τ rises with both, so this
    follows from them (`DERIVED`: `falsified` leaves it out)."""
    if rho is None or n < 4:
        return NO_RESULT
    return REPRODUCED if rho <= -0.3 else NOT_REPRODUCED if rho >= 0.3 else PARTLY


def neural_collapse(within_ratio: float | None, between_ratio: float | None = None) -> str:
    """Collapse onto the marginal predicts the within-base variance of the last layer's
    a1-predicting residual shrinking across the transition (the paper, K = 20: within up 1.15x,
    between down 0.61x). Post / pre ratios, the smallest within and the largest between over
    the runs: within <= 0.8: not reproduced; within >= 1 and between <= 1 (the paper's two
    directions): reproduced; else partly. No run with both phases: no result."""
    if within_ratio is None:
        return NO_RESULT
    if within_ratio <= 0.8:
        return NOT_REPRODUCED
    return REPRODUCED if within_ratio >= 1 and (between_ratio or 0) <= 1 else PARTLY


def weight_norm_peak(drawdown: float | None) -> str:
    """A deep-grokking style mechanism predicts the total weight norm peaking, then falling, around
    the transition (the paper: it grows monotonically). Its largest fall below its running
    maximum, as a fraction of it: under 2%: reproduced; over 5%: not reproduced; between:
    partly. No trajectory: no result."""
    if drawdown is None:
        return NO_RESULT
    return REPRODUCED if drawdown < 0.02 else NOT_REPRODUCED if drawdown > 0.05 else PARTLY


def falsified(sub_verdicts: list[str]) -> str:
    """Claim 8 from its independent sub-claims (one per alternative, `DERIVED` ones left out by
    the caller): every one reproduced: reproduced; none measured: no result; every measured one
    not reproduced: not reproduced; else partly (some ruled out, or some not measured yet)."""
    measured = [v for v in sub_verdicts if v != NO_RESULT]
    if not measured:
        return NO_RESULT
    if len(measured) == len(sub_verdicts) and all(v == REPRODUCED for v in measured):
        return REPRODUCED
    if all(v == NOT_REPRODUCED for v in measured):
        return NOT_REPRODUCED
    return PARTLY


PAPER_ASYMMETRY = (1.7, 4.4)  # (B, z) -> A time / the reverse's: the paper's range over K


def faster(ratios: list[float], at_least: list[float] = (), at_most: list[float] = ()) -> str:
    """Which direction is faster over seeds (ratios: (B, z) -> A time / the reverse's):
    "reverse" where every seed's ratio is above 1, "forward" where every one is below, else
    "neither". A seed with one direction censored (not reached by its budget) gives a bound:
    `at_least` (the forward censored: its end / the reverse's time), `at_most` (the reverse
    censored); a bound counts where it decides the side (at_least >= 1, at_most <= 1)."""
    n = len(ratios) + len(at_least) + len(at_most)
    if n and all(r > 1 for r in ratios) and all(b >= 1 for b in at_least) and not at_most:
        return "reverse"
    if n and all(r < 1 for r in ratios) and all(b <= 1 for b in at_most) and not at_least:
        return "forward"
    return "neither"


def _bounds(seeds) -> tuple[list[float], list[float], list[float]]:
    """(ratios, at_least, at_most) from a list of ratios or a dict with those three keys."""
    if isinstance(seeds, dict):
        return (
            list(seeds.get("ratios", [])),
            list(seeds.get("at_least", [])),
            list(seeds.get("at_most", [])),
        )
    return list(seeds), [], []


def asymmetry(per_k: dict) -> str:
    """Claim 6, two-sided, from the per-seed ratios (B, z) -> A time / the reverse's at each K
    (the paper's timing; its code's "lag" is the difference of the two, the ambiguous direction
    the lagging one). Each K's value: a list of ratios, or {"ratios", "at_least", "at_most"}
    with the bounds of censored seeds. At one K: the reverse faster in every seed with the mean
    in the paper's 1.7-4.4, every seed timed (holds); no seed's ratio or upper bound reaching
    1.7 and no lower bound, so at most a small lag or the forward direction faster (fails);
    else None (a lower bound leaves the size open). Over the K: `_of`. No K with a seed timed
    or bounded: no result."""
    checks = []
    lo, hi = PAPER_ASYMMETRY
    for seeds in per_k.values():
        ratios, at_least, at_most = _bounds(seeds)
        if not (ratios or at_least or at_most):
            continue
        side = faster(ratios, at_least, at_most)
        if ratios and not (at_least or at_most):
            mean = sum(ratios) / len(ratios)
            if side == "reverse" and lo <= mean <= hi:
                checks.append(True)
                continue
        if not at_least and max(ratios + at_most) < lo:
            checks.append(False)
        else:
            checks.append(None)
    return _of(checks) if checks else NO_RESULT


# --- interventions on the dynamics (branches) -----------------------------------------------------


def necessity(rows: list[dict]) -> str:
    """Is the routing head necessary for the escape? Per branch point (`step`), from one row per
    branch {step, change, escaped, shift}: the routing head's freeze and ablate branches never
    escape, or escape later than every control branch (no change, the least-used head frozen or
    ablated) (holds); they all escape no later than the latest control (fails); else None. A
    control that never escapes voids its point (None). Over the points: `_of`. No routing
    branch: no result."""
    checks = []
    for step in sorted({r["step"] for r in rows}):
        here = [r for r in rows if r["step"] == step]
        routing = [r for r in here if "routing" in r["change"]]
        controls = [r for r in here if "routing" not in r["change"]]
        if not routing or not controls:
            continue
        if not all(r["escaped"] for r in controls):
            checks.append(None)
            continue
        latest = max(r["shift"] for r in controls)
        later = [not r["escaped"] or r["shift"] > latest for r in routing]
        checks.append(True if all(later) else False if not any(later) else None)
    return _of(checks) if checks else NO_RESULT


UNITS = ("steps", "examples")


def noise_holds(rows: list[dict], unit: str = "steps") -> str:
    """Does gradient noise hold the plateau, read from lr and batch changes? From one row per
    branch {change, noise_scale, batch_x, remaining, escaped, budget, step}: the remaining wait,
    in steps or in examples (steps x batch_x, the batch over the parent's), grows with the noise
    scale η / B. `monotone` over the noise scales (changes that share one pooled), at the
    seed-to-seed scatter of one change (max / min over its seeds); a branch that never escaped
    counts its budget, a lower bound. Yes: reproduced; a step down beyond the scatter: not
    reproduced; else partly. Fewer than two noise scales: no result.

    Such changes move two things at once (a lower lr is also a slower pace; a larger batch also
    a larger sample per step), so this reads the old study beside `noise_only`, which decides.
    Until 2026-12-07 this rule read the wait in distance (steps x lr_x), a reading chosen after a
    third seed flipped the steps verdict: it makes an lr change's rise nearly automatic
    (docs/results.md)."""
    if unit not in UNITS:
        raise ValueError(f"unit is one of {UNITS}, got {unit!r}")
    kinds: dict[float, list[float]] = {}
    changes: dict[str, list[float]] = {}
    for r in rows:
        wait = r["remaining"] if r["escaped"] else r["budget"] - r["step"]
        wait *= r.get("batch_x", 1) if unit == "examples" else 1
        kinds.setdefault(r["noise_scale"], []).append(wait)
        changes.setdefault(r["change"], []).append(wait)
    if len(kinds) < 2:
        return NO_RESULT
    scatter = max((max(v) / min(v) for v in changes.values() if min(v) > 0), default=1.0)
    means = [float(sum(v) / len(v)) for _, v in sorted(kinds.items())]
    grows = monotone(means, max(scatter, 1.0))
    return REPRODUCED if grows else NOT_REPRODUCED if grows is False else PARTLY


def noise_only(rows: list[dict]) -> str:
    """Does gradient noise hold the plateau, with nothing else changed? Fixed on 2026-12-07,
    before any noise-scaled branch had trained (issue 44). From one row per branch {noise_scale
    C, seed, step, remaining (steps from the branch to τ), escaped, budget, eval_every, drift}:
    branches of one parent at one step, the same lr, batch and examples (C only scales the
    minibatch gradient's noise: `training.noise`); `drift` is the branch's mean step down the
    mean gradient (-Δθ·ḡ/|ḡ|) before its τ.

    1. The wait, in steps (a branch that never escaped counts its budget, a lower bound), per C
       the mean over seeds, must grow with C: `monotone`, at the tolerance of the seed scatter
       of one C (max / min over its escaped seeds, the largest over the Cs) but never finer
       than one evaluation (1 + eval_every / the shortest wait). A step down beyond it: not
       reproduced; no rise beyond it: partly.
    2. Under AdamW more noise also shrinks the step along the mean gradient (a larger second
       moment; clipping too, where it binds), and a slower pace alone lengthens a wait. The
       waits are read again at the pace of C = 1 (steps x drift_C / drift_1: how far C = 1
       would have gone down ḡ in the same time): they must still grow (`monotone`, the same
       tolerance), else partly (a smaller effective step explains the rise).
    Both: reproduced. Fewer than two Cs, a C with fewer than two seeds, or (for 2) no C = 1:
    no result, resp. partly. Rows of another lr or batch (lr_x, batch_x != 1) are refused."""
    if any(r.get("lr_x", 1) != 1 or r.get("batch_x", 1) != 1 for r in rows):
        raise ValueError("noise_only reads branches that change the noise scale alone")
    by: dict[float, list[dict]] = {}
    for r in rows:
        by.setdefault(float(r["noise_scale"]), []).append(r)
    if len(by) < 2 or any(len(v) < 2 for v in by.values()):
        return NO_RESULT

    def wait(r, pace=1.0):
        return (r["remaining"] if r["escaped"] else r["budget"] - r["step"]) * pace

    def grows(pace) -> bool | None:
        means, bounds, ratios = [], [], [1.0]
        for c in sorted(by):
            waits = [wait(r, pace(r)) for r in by[c]]
            done = [w for r, w in zip(by[c], waits) if r["escaped"]]
            mean = sum(waits) / len(waits)
            means.append(mean if len(done) == len(waits) else None)
            bounds.append(None if len(done) == len(waits) else mean)
            if len(done) >= 2 and min(done) > 0:
                ratios.append(max(done) / min(done))
        shortest = min(wait(r) for r in rows)
        resolution = 1 + max(r["eval_every"] for r in rows) / shortest if shortest > 0 else 1
        return monotone(means, max(max(ratios), resolution), bounds)

    in_steps = grows(lambda r: 1.0)
    if in_steps is not True:
        return NOT_REPRODUCED if in_steps is False else PARTLY
    ones = [r["drift"] for r in by.get(1.0, []) if r.get("drift")]
    if not ones or any(not r.get("drift") or r["drift"] <= 0 for r in rows):
        return PARTLY
    base = sum(ones) / len(ones)
    return REPRODUCED if grows(lambda r: r["drift"] / base) else PARTLY
