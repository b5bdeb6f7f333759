import math

import numpy as np
import pytest

import selector_lens as sl
from selector_lens import viz
from selector_lens.runs.run import run_table
from selector_lens.runs.transition import (
    first_below,
    plateau_height,
    power_law_fit,
    solve_time,
    summarize,
    tau,
)
from selector_lens.viz.dashboard import sweep_dashboard
from tests.helpers import render, tiny


def test_tau_on_a_synthetic_curve():
    steps = [0, 50, 100, 150, 200, 250]
    curve = [2.30, 2.30, 2.29, 1.20, 1.10, 0.05]  # log 10 = 2.303: threshold 1.151
    assert tau(steps, curve, math.log(10)) == 200
    assert tau(steps, curve, math.log(10), threshold=0.6) == 150
    assert tau(steps, [2.3] * 6, math.log(10)) is None
    assert tau(steps, curve, 0.0) is None  # K = 1
    assert plateau_height(steps, curve, 200) == pytest.approx(2.29)  # median of steps 50..150
    s = summarize([{"step": a, "candidate_loss": b} for a, b in zip(steps, curve)], math.log(10))
    assert s["tau"] == 200 and s["plateau_over_log_k"] == pytest.approx(2.29 / math.log(10))


def test_waiting_times_on_a_synthetic_log():
    rows = [
        {"step": 0, "token_acc": 0.2, "loss": 3.0},
        {"step": 50, "token_acc": 0.8, "loss": 0.5},
        {"step": 100, "token_acc": 0.95, "loss": 0.2},
        {"step": 150, "token_acc": 0.99, "loss": 0.05},
    ]
    assert solve_time(rows, 0.95) == 100 and solve_time(rows, 0.999) is None
    assert first_below(rows, "loss", 0.1) == 150 and first_below(rows, "loss", 0.01) is None


def test_power_law_fit_recovers_an_exact_law():
    x = np.array([1e3, 2e3, 5e3, 1e4, 2e4])
    fit = power_law_fit(x, 3.0 * x**1.2)
    assert (
        fit["alpha"] == pytest.approx(1.2)
        and fit["C"] == pytest.approx(3.0)
        and fit["r2"] == pytest.approx(1.0)
    )
    assert fit["alpha_ci"][0] == pytest.approx(1.2) and fit["alpha_ci"][1] == pytest.approx(1.2)


def test_power_law_fit_interval_covers_a_noisy_law():
    rng = np.random.default_rng(1)
    x = np.geomspace(1e3, 4e4, 11)
    y = 0.02 * x**1.19 * np.exp(rng.normal(0, 0.05, len(x)))
    fit = power_law_fit(x, y)
    lo, hi = fit["alpha_ci"]
    assert lo < 1.19 < hi and hi - lo < 0.2 and 0.95 < fit["r2"] <= 1
    with pytest.raises(sl.SelectorLensError, match="at least two points"):
        power_law_fit([10, 10], [1, 2])
    with pytest.raises(sl.SelectorLensError, match="positive"):
        power_law_fit([1, 2, 3], [1, 0, 2])


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    for n_bases in (6, 12, 24):
        sl.train(
            tiny(task={"n_bases": n_bases}, steps=120, early_stop_evals=2),
            out=root / f"nb{n_bases}",
        )
    sl.train(
        tiny(task={"n_bases": 18, "k": 2}, steps=120, early_stop_evals=2), out=root / "k2"
    )  # D = 36 too
    sl.train(tiny(steps=10, lr=1e-5), out=root / "stuck")  # never transitions
    return root


def test_run_table_and_sweep_figures(sweep):
    table = run_table(sweep)
    assert len(table) == 5 and sorted(table.D) == [18, 36, 36, 36, 72]
    assert np.isnan(table.set_index("run").loc[str(sweep / "stuck"), "tau"])
    done = table[table.tau.notna()]
    fit = power_law_fit(done.D, done.tau)
    fig = viz.tau_vs_d(table, fit)
    points = {(x, y) for t in fig.data if t.mode == "markers" for x, y in zip(t.x, t.y)}
    assert points == set(zip(done.D, done.tau))
    line = [t for t in fig.data if t.mode == "lines"][0]
    assert np.allclose(line.y, fit["C"] * np.asarray(line.x) ** fit["alpha"])
    by_k = viz.tau_vs_k(table)
    assert len(done[done.D == 36].k.unique()) == 2  # K = 2 and 3 at D = 36 both transitioned
    assert [t.name for t in by_k.data] == ["D=36"]
    trace = by_k.data[0]
    want = done[done.D == 36].sort_values("k")
    assert list(trace.x) == list(want.k) and list(trace.y) == list(want.tau)


@pytest.mark.slow
def test_sweep_dashboard_renders(sweep, tmp_path):
    path = sweep_dashboard(sweep, tmp_path / "s.html")
    html = path.read_text()
    assert "no transition" in html and ("α =" in html or "\\u03b1 =" in html)
    errors, requests, figs, rendered, _ = render(path)
    assert errors == [] and all(u.startswith("file://") for u in requests)
    assert figs == rendered >= 1


def test_collective_transition_on_synthetic_groups():
    from selector_lens.runs.transition import collective_transition

    steps = list(range(0, 1100, 100))
    # ten groups of K=4: all cross (> 2 of 4 right) between steps 500 and 600, one never does
    rows = []
    for s in steps:
        correct = [4 if s >= 500 + 100 * (g % 2) else 1 for g in range(9)] + [1]
        rows.append({"step": s, "group_correct": correct})
    out = collective_transition(rows, k=4, tau_step=500)
    assert out["groups"] == 10 and out["never_crossed"] == 1
    assert (
        out["crossed_by_half_tau"] == 0.0
        and out["crossed_by_tau"] == 0.5
        and out["crossed_by_1.5_tau"] == 0.9
    )
    assert out["crossing_q10"] == 500 and out["crossing_q90"] == 600
    assert out["window_over_tau"] == pytest.approx(0.2)
    assert out["incremental_window_over_tau"] == pytest.approx(0.8 * 600 / 500)
