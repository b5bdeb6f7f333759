"""The paper code's timings of a curve (`runs.transition`) on hand-written logs."""

import math

import numpy as np
import pytest

from selector_lens.runs.transition import (
    collective_transition,
    exponent_difference,
    first_target_tau,
    fraction_time,
    power_law_fit,
    window_width,
)

LOG_K = math.log(10)


def log(candidate, first_target=None):
    """Evals every 100 steps from step 0."""
    first_target = first_target or [None] * len(candidate)
    return [
        {"step": 100 * i, "candidate_loss": c, "first_target_loss": f}
        for i, (c, f) in enumerate(zip(candidate, first_target))
    ]


def test_first_target_tau_reads_the_first_target_loss():
    rows = log([LOG_K] * 4, [3.5, 3.0, 0.5 * LOG_K, 0.5 * LOG_K - 1e-3])
    assert first_target_tau(rows, LOG_K) == 300  # strictly below 0.5 log K
    assert first_target_tau(rows, 0.0) is None  # K = 1: nothing to time


def test_window_width_from_the_last_high_eval_to_the_first_low_one():
    k = LOG_K
    #          0     100     200       300       400       500       600
    rows = log([k, 0.96 * k, 0.9 * k, 0.97 * k, 0.5 * k, 0.04 * k, 0.01 * k])
    w = window_width(rows, k)
    assert (w["start"], w["end"], w["width"]) == (300, 500, 200)
    assert w["lowest_over_log_k"] == pytest.approx(0.01)


def test_window_width_of_a_run_that_never_gets_low_is_censored():
    rows = log([LOG_K, 0.5 * LOG_K, 0.07 * LOG_K])
    w = window_width(rows, LOG_K)
    assert w["end"] is None and w["width"] is None
    assert w["start"] == 0 and w["last_step"] == 200
    assert w["lowest_over_log_k"] == pytest.approx(0.07)


def test_fraction_time_is_relative_to_the_first_eval():
    rows = log([LOG_K] * 4, [4.0, 1.0, 0.4, 0.39])
    assert fraction_time(rows, 0.1) == 300  # 0.1 x 4.0 = 0.4: strictly below
    assert fraction_time(rows, 0.5) == 100
    assert fraction_time(rows, 0.05) is None


def test_exponent_difference_of_two_exact_laws():
    d = np.array([1e3, 2e3, 4e3, 8e3])
    a = power_law_fit(d, 3 * d**1.3)
    b = power_law_fit(d, 5 * d**1.1)
    diff = exponent_difference(a, b)
    assert diff["difference"] == pytest.approx(0.2)
    lo, hi = diff["difference_ci"]
    assert lo == pytest.approx(0.2) and hi == pytest.approx(0.2)  # no scatter: every draw exact


def test_exponent_difference_interval_widens_with_scatter():
    rng = np.random.default_rng(0)
    d = np.geomspace(1e3, 4e4, 10)
    a = power_law_fit(d, d**1.3 * np.exp(rng.normal(0, 0.1, 10)))
    b = power_law_fit(d, d**1.2 * np.exp(rng.normal(0, 0.1, 10)))
    lo, hi = exponent_difference(a, b)["difference_ci"]
    assert lo < 0.1 < hi and hi - lo > 0.05


def test_collective_at_least_counts_a_group_at_the_level():
    # K = 5: a group at 4 of 5 (0.8) is solved at >= 0.8, not at > 0.8
    rows = [
        {"step": 0, "group_correct": [0, 0]},
        {"step": 100, "group_correct": [4, 1]},
        {"step": 200, "group_correct": [5, 5]},
    ]
    strict = collective_transition(rows, 5, 200, level=0.8)
    paper = collective_transition(rows, 5, 200, level=0.8, at_least=True)
    assert strict["crossing_q10"] == 200 and strict["crossed_by_half_tau"] == 0.0
    assert paper["crossed_by_half_tau"] == 0.5  # the first group at step 100 = τ/2
    assert paper["solved_when"] == ">= 0.8 of its K examples"


def test_fit_groups_never_mix_runs_of_different_lr():
    import pandas as pd

    from selector_lens.runs.transition import fit_groups

    d = [1000, 2000, 4000]
    rows = [
        {
            "D": x,
            "k": 5,
            "tau": 0.1 * x**1.2 * f,
            "direction": "bz_to_a",
            "z_length": 2,
            "z_groups": 1,
            "lr": lr,
            "weight_decay": 0.01,
            "batch_size": 128,
        }
        for lr, f in ((1e-3, 1.0), (3e-3, 3.0))
        for x in d
    ]
    out = fit_groups(pd.DataFrame(rows))
    assert out["varying"] == ["lr"]
    assert [g["options"] for g in out["groups"]] == [{"lr": 1e-3}, {"lr": 3e-3}]
    for g in out["groups"]:  # each group its own exact law; mixed, the 3x offset would bend it
        assert g["n_runs"] == 3 and g["fits"]["tau_vs_D"]["alpha"] == pytest.approx(1.2)
    same = fit_groups(pd.DataFrame(rows[:3]))
    assert same["varying"] == [] and same["groups"][0]["n_runs"] == 3
