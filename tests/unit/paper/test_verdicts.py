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
        "dz_lead_frac": lead,
        "mean_ablation_delta": {"post": post},
        "best_alone_candidate_loss": alone,
        "log_k": log_k,
    }


@pytest.mark.parametrize(
    "rows,want",
    [
        ([cascade_row(), cascade_row(lead=0.2)], REPRODUCED),
        ([cascade_row(lead=0.05)], PARTLY),
        ([cascade_row(lead=None)], PARTLY),  # no Δz onset: the lead is not shown
        ([cascade_row(post=0.5)], PARTLY),
        ([cascade_row(alone=0.5)], PARTLY),  # one head alone gets below 0.5 log K: it suffices
        ([cascade_row(lead=0.0, post=0.5, alone=0.5)], NOT_REPRODUCED),
        ([cascade_row(tau=None)], NO_RESULT),
    ],
)
def test_cascade(rows, want):
    assert v.cascade(rows) == want


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
    assert v.geometry(rows) == want


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


def fit(alpha, lo, hi):
    return {"alpha": alpha, "alpha_ci": [lo, hi]}


@pytest.mark.parametrize(
    "fits,want",
    [
        ({"tau_vs_D": fit(1.2, 1.1, 1.3), "tau_vs_K": {10000: fit(0.05, -0.1, 0.2)}}, REPRODUCED),
        (
            {"tau_vs_D": fit(0.9, 0.8, 1.0), "tau_vs_K": {10000: fit(0.05, -0.1, 0.2)}},
            PARTLY,
        ),  # flat in K only
        (
            {"tau_vs_D": fit(1.2, 1.1, 1.3), "tau_vs_K": {10000: fit(0.6, 0.4, 0.8)}},
            PARTLY,
        ),  # grows with D only
        ({"tau_vs_D": fit(1.2, 1.1, 1.3), "tau_vs_K": {}}, PARTLY),  # no K fit: not shown flat
        ({"tau_vs_D": fit(0.3, 0.2, 0.4), "tau_vs_K": {10000: fit(0.6, 0.4, 0.8)}}, NOT_REPRODUCED),
        ({"tau_vs_D": None, "tau_vs_K": {}}, NO_RESULT),
    ],
)
def test_scaling(fits, want):
    assert v.scaling(fits) == want


@pytest.mark.parametrize(
    "parts,lr_n,batch_n,want",
    [
        ({"a": True, "b": True, "c": True}, 4, 4, REPRODUCED),
        ({"a": True, "b": False, "c": True}, 4, 1, PARTLY),
        ({"a": False, "b": False, "c": False}, 1, 4, NOT_REPRODUCED),
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
    assert [v.neural_collapse(r) for r in (1.0, 0.9, 0.8, None)] == [
        REPRODUCED,
        PARTLY,
        NOT_REPRODUCED,
        NO_RESULT,
    ]
    assert [v.weight_norm_peak(d) for d in (0.0199, 0.03, 0.051, None)] == [
        REPRODUCED,
        PARTLY,
        NOT_REPRODUCED,
        NO_RESULT,
    ]


@pytest.mark.parametrize(
    "ratio,want",
    [
        (1.7, REPRODUCED),
        (4.4, REPRODUCED),
        (1.3, PARTLY),
        (6.0, PARTLY),
        (1.0, NOT_REPRODUCED),
        (0.5, NOT_REPRODUCED),
        (None, NO_RESULT),
    ],
)
def test_asymmetry(ratio, want):
    assert v.asymmetry(ratio) == want
