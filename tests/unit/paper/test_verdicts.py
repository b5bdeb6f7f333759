"""Every verdict rule on synthetic tables, for every verdict it can return."""

import pytest

from selector_lens.paper import verdicts as v
from selector_lens.paper.verdicts import NO_RESULT, NOT_REPRODUCED, PARTLY, REPRODUCED


def seed(tau=1000, height=1.0, final=0.01, log_k=2.3):
    return {"tau": tau, "plateau_over_log_k": height, "final_candidate_loss": final, "log_k": log_k}


@pytest.mark.parametrize(
    "rows,want",
    [
        ([seed(), seed(height=1.1)], REPRODUCED),
        ([seed(), seed(height=1.3)], PARTLY),  # one plateau off log K by 30%
        ([seed(), seed(tau=None, final=2.3)], PARTLY),  # one seed never drops
        ([seed(height=0.5), seed(tau=None, final=2.3)], NOT_REPRODUCED),
        ([seed(tau=None), seed(tau=None)], NO_RESULT),
    ],
)
def test_marginal_first(rows, want):
    assert v.marginal_first(rows) == want


def crossing(half=0.0, window=0.2, tau=1000):
    return {"tau": tau, "crossed_by_half_tau": half, "window_over_tau": window}


@pytest.mark.parametrize(
    "rows,want",
    [
        ([crossing(), crossing(half=0.1, window=0.5)], REPRODUCED),  # the bounds are inclusive
        ([crossing(half=0.3)], PARTLY),
        ([crossing(window=0.9)], PARTLY),
        ([crossing(half=0.3, window=0.9)], NOT_REPRODUCED),
        ([crossing(tau=None)], NO_RESULT),
        ([crossing(window=None)], NO_RESULT),
    ],
)
def test_collective(rows, want):
    assert v.collective(rows) == want


def cascade_row(lead=0.4, post=3.0, alone=2.0, tau=1000, log_k=2.3):
    return {
        "tau": tau,
        "paper_lead_frac": lead,
        "dz_lead_frac": -1.0,  # ours, not read by the verdict
        "mean_ablation_delta": {"post": post},
        "best_alone_candidate_loss": alone,
        "log_k": log_k,
    }


@pytest.mark.parametrize(
    "rows,want",
    [
        ([cascade_row(), cascade_row(lead=0.2)], REPRODUCED),
        ([cascade_row(lead=0.05)], PARTLY),  # a lead under 0.1 τ: cannot tell
        ([cascade_row(lead=-0.2)], PARTLY),  # Δz after the onset: that check fails, two hold
        ([cascade_row(lead=-0.2, post=0.5, alone=0.5)], NOT_REPRODUCED),
        ([cascade_row(lead=None)], PARTLY),  # no Δz onset: the lead is not shown
        ([cascade_row(post=0.5)], PARTLY),
        ([cascade_row(alone=0.5)], PARTLY),  # one head alone gets below 0.5 log K: it suffices
        ([cascade_row(lead=0.0, post=0.5, alone=0.5)], NOT_REPRODUCED),
        ([cascade_row(tau=None)], NO_RESULT),
    ],
)
def test_cascade(rows, want):
    assert v.cascade(rows) == want


def test_cascade_reads_the_lead_it_is_given():
    rows = [{**cascade_row(lead=-0.3), "dz_lead_frac": 0.4}]
    assert v.cascade(rows) == PARTLY
    assert v.cascade(rows, lead_key="dz_lead_frac") == REPRODUCED


def hess(lmin=-0.01, ratio=500, share=0.8):
    return {"lambda_min": lmin, "ratio": ratio, "noise_share_top": share}


@pytest.mark.parametrize(
    "rows,want",
    [
        ([hess(), hess(ratio=100, share=0.5)], REPRODUCED),
        ([hess(), hess(lmin=0.001)], PARTLY),  # a minimum, not a saddle, at one checkpoint
        ([hess(ratio=20)], PARTLY),
        ([hess(lmin=0.1, ratio=20, share=0.1)], NOT_REPRODUCED),
        ([], NO_RESULT),
    ],
)
def test_geometry(rows, want):
    assert v.geometry(v.geometry_subclaims(rows, [])) == want


def compared(shifted_min=-1e-4, shifted_ratio=3e4, iters=12, lanczos_min=-0.5, lanczos_ratio=6):
    return {
        "shifted_lambda_min": shifted_min,
        "shifted_ratio": shifted_ratio,
        "shifted_iters": iters,
        "lanczos_lambda_min": lanczos_min,
        "lanczos_ratio": lanczos_ratio,
    }


ARTEFACT = v.ARTEFACT


@pytest.mark.parametrize(
    "rows,want",
    [
        ([compared(), compared(iters=11)], True),  # stopped at once, near 0, a huge ratio
        ([compared(), compared(shifted_min=-0.49, shifted_ratio=6.1)], True),  # converged: small
        ([compared(iters=13)], False),  # a huge ratio after running on: not the stop's doing
        ([compared(shifted_min=-0.49, shifted_ratio=6.1)], False),  # no ratio >= 100 at all
        ([compared(shifted_min=-0.1)], False),  # a huge ratio, |λmin| not far below Lanczos's
        ([], None),  # not measured
    ],
)
def test_the_paper_estimator_subclaim(rows, want):
    subs = v.geometry_subclaims([hess()], rows)
    assert subs[ARTEFACT] is want
    assert v.geometry(subs) == REPRODUCED  # reported beside the verdict, never judged in it


def par(top, kind="parity"):
    return {"kind": kind, "top": [(top, 1.0)]}


@pytest.mark.parametrize(
    "rows,want",
    [
        (
            [par("L0H1"), par("L0H3"), par("L0H3"), par("L2H0", kind="ours")],
            REPRODUCED,
        ),  # the first is not read
        ([par("L0H3"), par("L0H3"), par("L0H1")], PARTLY),
        ([par("L0H3"), par("L0H1"), par("L1H1")], NOT_REPRODUCED),
        ([par("L0H3")], NOT_REPRODUCED),  # nothing after the first checkpoint
    ],
)
def test_parity(rows, want):
    assert v.parity(rows) == want


@pytest.mark.parametrize(
    "interval,want",
    [
        ((-0.1, 0.1), True),
        ((-0.15, 0.15), True),  # the tolerance's edges are inside
        ((0.16, 0.3), False),
        ((-0.4, -0.16), False),
        ((0.1, 0.2), None),  # across an edge: the data cannot tell
        ((-0.3, 0.3), None),
    ],
)
def test_inside(interval, want):
    assert v.inside(interval, -0.15, 0.15) is want


FLAT = (-0.1, 0.1)


@pytest.mark.parametrize(
    "difference,k_cis,want",
    [
        ((-0.05, 0.12), [FLAT, (-0.2, 0.2)], REPRODUCED),
        ((0.2, 0.4), [FLAT], PARTLY),  # α off the paper's by more than the tolerance; K flat
        ((0.2, 0.4), [(0.3, 0.5)], NOT_REPRODUCED),  # both clear of their tolerances
        ((-0.4, -0.2), [], NOT_REPRODUCED),  # no K fit: that check undetermined, α fails
        ((-0.01, 0.19), [(-0.34, 0.09)], PARTLY),  # both across an edge: undetermined
        ((-0.05, 0.05), [FLAT, (0.3, 0.5)], PARTLY),  # one fixed D grows with K
        (None, [FLAT], NO_RESULT),
    ],
)
def test_scaling(difference, k_cis, want):
    assert v.scaling(difference, k_cis) == want


@pytest.mark.parametrize(
    "taus,scatter,want",
    [
        ([100, 200, 400], 1.2, True),
        ([100, 95, 400], 1.2, True),  # a dip within the scatter is a tie
        ([100, 70, 400], 1.2, False),  # a dip beyond it
        ([100, 110], 1.2, None),  # the whole change within the scatter
        ([100, None, 400], 1.2, None),  # a censored point: cannot order
        ([100], 1.2, None),
    ],
)
def test_monotone(taus, scatter, want):
    assert v.monotone(taus, scatter) is want


@pytest.mark.parametrize(
    "taus,at_least,want",
    [
        ([100, None], [None, 400], True),  # the last censored beyond the scatter: a rise
        ([100, None], [None, 110], None),  # its bound within the scatter: open
        ([100, None, 500], [None, 150, None], True),  # a bound between two times
        ([100, None, 50], [None, 400, None], False),  # a time below an earlier bound
        ([400, None], [None, 100], None),  # a bound below the first time: no step down shown
        ([None, 400], [100, None], None),  # the first censored: no rise can be shown
        ([100, None], [None, None], None),  # neither a time nor a bound
    ],
)
def test_monotone_reads_the_bounds_of_censored_points(taus, at_least, want):
    """A censored point is at least its bound: it proves a rise or a later fall, never a fall
    into it; with no bounds the rule is the one above."""
    assert v.monotone(taus, 1.2, at_least) is want


@pytest.mark.parametrize(
    "ratio,want",
    [(1.5, True), (1.3, None), (1.1, False), (None, None)],
)
def test_ratio_beyond(ratio, want):
    assert v.ratio_beyond(ratio, 1.2, 1.4) is want


@pytest.mark.parametrize(
    "parts,lr_n,batch_n,want",
    [
        ({"a": True, "b": True, "c": True}, 4, 4, REPRODUCED),
        ({"a": True, "b": False, "c": True}, 4, 1, PARTLY),
        ({"a": False, "b": False, "c": False}, 1, 4, NOT_REPRODUCED),
        ({"a": None, "b": False, "c": None}, 4, 4, NOT_REPRODUCED),  # one fails, none holds
        ({"a": None, "b": True, "c": None}, 4, 4, PARTLY),
        ({"a": None, "b": None, "c": None}, 4, 4, PARTLY),  # undetermined throughout
        (
            {"a": True, "b": True, "c": True},
            1,
            1,
            NO_RESULT,
        ),  # too few escaped runs to read anything
    ],
)
def test_noise(parts, lr_n, batch_n, want):
    assert v.noise(parts, lr_n, batch_n) == want


@pytest.mark.parametrize(
    "subs,want",
    [
        ([REPRODUCED] * 7, REPRODUCED),
        ([REPRODUCED] * 6 + [NO_RESULT], PARTLY),
        ([REPRODUCED, NOT_REPRODUCED] + [NO_RESULT] * 5, PARTLY),
        ([NOT_REPRODUCED, NOT_REPRODUCED] + [NO_RESULT] * 5, NOT_REPRODUCED),
        ([NO_RESULT] * 7, NO_RESULT),
    ],
)
def test_falsified_from_its_sub_claims(subs, want):
    assert v.falsified(subs) == want


@pytest.mark.parametrize(
    "gamma,ci,stuck,want",
    [
        (0.02, [-0.1, 0.15], False, REPRODUCED),
        (0.9, [0.7, 1.1], False, NOT_REPRODUCED),
        (0.4, [0.1, 0.7], False, PARTLY),
        (0.1, None, False, PARTLY),
        (0.8, None, False, NOT_REPRODUCED),
        (None, None, False, NO_RESULT),
        (0.02, [-0.1, 0.15], True, NOT_REPRODUCED),
    ],
)
def test_cancellation(gamma, ci, stuck, want):
    assert v.cancellation(gamma, ci, stuck) == want


def test_the_other_alternatives_at_their_thresholds():
    assert v.barrier_crossing(PARTLY, True) == REPRODUCED
    assert v.barrier_crossing(PARTLY, False) == NOT_REPRODUCED
    assert v.barrier_crossing(NO_RESULT, True) == NO_RESULT
    assert v.incremental(PARTLY) == PARTLY
    pre, mid = {"phase": "pre"}, {"phase": "mid"}
    assert v.spinodal([{**pre, "lambda_min": -0.1}, {**mid, "lambda_min": -0.2}]) == REPRODUCED
    assert v.spinodal([{**pre, "lambda_min": 0.0}, {**mid, "lambda_min": -0.2}]) == NOT_REPRODUCED
    assert v.spinodal([{**pre, "lambda_min": -0.1}, {**mid, "lambda_min": 0.1}]) == PARTLY
    assert v.spinodal([]) == NO_RESULT
    assert [v.adamw_timescale(r, 5) for r in (-0.3, 0.0, 0.3)] == [
        REPRODUCED,
        PARTLY,
        NOT_REPRODUCED,
    ]
    assert v.adamw_timescale(-0.9, 3) == NO_RESULT
    assert [v.neural_collapse(r, 0.6) for r in (1.0, 0.9, 0.8, None)] == [
        REPRODUCED,
        PARTLY,
        NOT_REPRODUCED,
        NO_RESULT,
    ]
    assert v.neural_collapse(1.2, 1.4) == PARTLY  # within up, but between up where the paper's fell
    assert "AdamW timescale" in v.DERIVED
    assert [v.weight_norm_peak(d) for d in (0.0199, 0.03, 0.051, None)] == [
        REPRODUCED,
        PARTLY,
        NOT_REPRODUCED,
        NO_RESULT,
    ]


@pytest.mark.parametrize(
    "ratios,want",
    [
        ([1.2, 1.5, 2.0], "reverse"),
        ([0.9, 0.95], "forward"),
        ([0.9, 1.1], "neither"),
        ([1.0, 1.2], "neither"),  # a tie in one seed
        ([], "neither"),
    ],
)
def test_faster(ratios, want):
    assert v.faster(ratios) == want


@pytest.mark.parametrize(
    "ratios,at_least,at_most,want",
    [
        ([], [1.45, 1.75], [], "reverse"),  # the forward censored after the reverse's time
        ([1.2], [0.8], [], "neither"),  # censored before the reverse's time: undecided
        ([0.9], [], [0.7], "forward"),  # the reverse censored after the forward's time
        ([0.9], [1.3], [], "neither"),  # a bound on the other side
    ],
)
def test_faster_reads_the_bounds_of_censored_seeds(ratios, at_least, at_most, want):
    assert v.faster(ratios, at_least, at_most) == want


@pytest.mark.parametrize(
    "per_k,want",
    [
        ({5: [1.8, 2.0, 2.5], 10: [1.5, 3.0, 4.0]}, REPRODUCED),
        ({5: [1.8, 2.0, 2.5], 10: [0.9, 0.95, 1.0]}, PARTLY),  # one K level
        ({5: [1.0, 1.1, 1.2], 10: [0.93, 0.95, 0.96]}, NOT_REPRODUCED),  # none reaches 1.7
        ({5: [0.5, 0.6, 0.7]}, NOT_REPRODUCED),  # the forward faster: fails the other way
        ({5: [0.9, 2.0, 3.0]}, PARTLY),  # seeds disagree on the faster direction
        ({5: [5.0, 6.0, 7.0]}, PARTLY),  # the reverse faster by more than the paper says
        ({5: [], 10: []}, NO_RESULT),
    ],
)
def test_asymmetry(per_k, want):
    assert v.asymmetry(per_k) == want


def bounded(ratios=(), at_least=(), at_most=()):
    return {"ratios": list(ratios), "at_least": list(at_least), "at_most": list(at_most)}


@pytest.mark.parametrize(
    "per_k,want",
    [
        # K = 20 as measured: the forward censored at 11,000 in every seed, the reverse timed
        # at 6,300-7,600: the reverse faster, the size open (never "holds" on a bound)
        ({5: bounded([0.9, 1.0]), 20: bounded(at_least=[1.45, 1.75])}, NOT_REPRODUCED),
        ({5: bounded([2.0, 2.5]), 20: bounded(at_least=[1.45, 1.75])}, PARTLY),
        ({20: bounded([2.0], at_least=[1.8])}, PARTLY),
        # a censored reverse bounds the ratio above: below 1.7 everywhere, so it fails
        ({20: bounded([1.1], at_most=[0.9])}, NOT_REPRODUCED),
        ({20: bounded(at_most=[2.5])}, PARTLY),
        ({20: bounded()}, NO_RESULT),
    ],
)
def test_asymmetry_with_censored_seeds(per_k, want):
    assert v.asymmetry(per_k) == want


def branch_row(change, shift, step=100, escaped=True):
    return {"step": step, "change": change, "shift": shift, "escaped": escaped}


CONTROLS = [branch_row("no change", 0), branch_row("freeze control", 20)]


@pytest.mark.parametrize(
    "rows,want",
    [
        (CONTROLS + [branch_row("freeze routing", 0, escaped=False)], REPRODUCED),
        (CONTROLS + [branch_row("ablate routing", 50)], REPRODUCED),  # later than every control
        (CONTROLS + [branch_row("ablate routing", 10)], NOT_REPRODUCED),  # within the controls
        (
            CONTROLS + [branch_row("freeze routing", 50), branch_row("ablate routing", 10)],
            PARTLY,
        ),
        (
            [branch_row("no change", 0, escaped=False), branch_row("freeze routing", 50)],
            PARTLY,
        ),  # a control that never escapes voids the test
        (CONTROLS, NO_RESULT),
    ],
)
def test_necessity(rows, want):
    assert v.necessity(rows) == want


def noise_row(scale, remaining, escaped=True, change=None, batch_x=1):
    return {
        "change": change or f"noise {scale}",
        "noise_scale": scale,
        "batch_x": batch_x,
        "remaining": remaining,
        "escaped": escaped,
        "budget": 3000,
        "step": 500,
    }


@pytest.mark.parametrize(
    "rows,want",
    [
        (
            [noise_row(1, 500), noise_row(1, 550), noise_row(4, 1500), noise_row(16, 0, False)],
            REPRODUCED,
        ),
        ([noise_row(1, 1500), noise_row(4, 500)], NOT_REPRODUCED),  # more noise, sooner out
        ([noise_row(1, 500), noise_row(1, 700), noise_row(4, 650)], PARTLY),  # within the scatter
        ([noise_row(1, 500)], NO_RESULT),
        # the published K = 20 lr series, in steps: x0.25 waits 2,800 and x0.5 2,000 (beyond the
        # 1.30 scatter of lr x4's seeds): a step down, whatever the distance travelled says
        (
            [
                noise_row(0.25, 2800, change="lr x0.25"),
                noise_row(0.5, 1900, change="lr x0.5"),
                noise_row(0.5, 2100, change="lr x0.5"),
                noise_row(1, 2200, change="no change"),
                noise_row(4, 6600, change="lr x4"),
                noise_row(4, 8600, change="lr x4"),
            ],
            NOT_REPRODUCED,
        ),
    ],
)
def test_noise_holds_in_steps(rows, want):
    assert v.noise_holds(rows) == want


def test_noise_holds_in_examples_counts_the_batch():
    # batch x4 waits 600 steps (2,400 batches of the parent's): in steps it is out sooner than
    # no change's 2,200 at a quarter of the noise scale; in examples it waits longer
    rows = [
        noise_row(0.25, 600, change="batch x4", batch_x=4),
        noise_row(0.25, 610, change="batch x4", batch_x=4),
        noise_row(1, 2000, change="no change"),
        noise_row(1, 2050, change="no change"),
    ]
    assert v.noise_holds(rows, "steps") == REPRODUCED  # 2,025 over 605 steps
    assert v.noise_holds(rows, "examples") == NOT_REPRODUCED  # 2,420 down to 2,025
    with pytest.raises(ValueError):
        v.noise_holds(rows, "distance")


def only_row(c, remaining, seed=1, escaped=True, drift=1.0, **kw):
    return {
        "noise_scale": c,
        "seed": seed,
        "step": 2200,
        "remaining": remaining,
        "escaped": escaped,
        "budget": 13500,
        "eval_every": 100,
        "drift": drift,
        **kw,
    }


def two_seeds(c, a, b, drift=1.0, escaped=True):
    return [only_row(c, a, 1, escaped, drift), only_row(c, b, 2, escaped, drift)]


@pytest.mark.parametrize(
    "rows,want",
    [
        # the wait grows with C beyond the scatter (1.1), at an unchanged pace: noise holds
        (
            two_seeds(0, 1000, 1100) + two_seeds(1, 2200, 2200) + two_seeds(4, 5000, 5200),
            REPRODUCED,
        ),
        # a branch that never escaped counts its budget: a bound that proves the rise
        (
            two_seeds(0, 1000, 1050) + two_seeds(1, 2200, 2300) + two_seeds(4, 0, 0, escaped=False),
            REPRODUCED,
        ),
        # more noise, out sooner beyond the scatter: not reproduced
        (
            two_seeds(0, 3000, 3100) + two_seeds(1, 2200, 2200) + two_seeds(4, 1000, 1000),
            NOT_REPRODUCED,
        ),
        # within the seed scatter (1.6x at C = 0): partly
        (two_seeds(0, 1500, 2400) + two_seeds(1, 2200, 2300) + two_seeds(4, 2400, 2500), PARTLY),
        # a rise of one evaluation (100 steps) is within the resolution
        (two_seeds(0, 2100, 2100) + two_seeds(1, 2200, 2200), PARTLY),
        # the rise is all pace: C = 4 goes a third as far down ḡ per step and waits 3x
        (two_seeds(1, 2000, 2000) + two_seeds(4, 6000, 6100, drift=1 / 3), PARTLY),
        # ... while at half the pace and 3x the wait, noise holds beyond the pace
        (two_seeds(1, 2000, 2000) + two_seeds(4, 6000, 6100, drift=0.5), REPRODUCED),
        # no C = 1 to read the pace against: partly
        (two_seeds(0, 1000, 1000) + two_seeds(4, 6000, 6100), PARTLY),
        # one seed at a C: no tolerance, no result
        (two_seeds(0, 1000, 1000) + [only_row(4, 6000)], NO_RESULT),
        (two_seeds(1, 1000, 1000), NO_RESULT),
    ],
)
def test_noise_only(rows, want):
    assert v.noise_only(rows) == want


def test_noise_only_refuses_rows_that_change_more_than_the_noise():
    rows = two_seeds(0, 1000, 1100) + [only_row(1, 2200, lr_x=0.5), only_row(1, 2200, seed=2)]
    with pytest.raises(ValueError, match="noise scale alone"):
        v.noise_only(rows)
