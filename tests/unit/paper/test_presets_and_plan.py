"""The paper preset holds what issue 12 asks of it; the plan's arithmetic on given costs."""

import pytest

from selector_lens.errors import SelectorLensError
from selector_lens.paper import presets
from selector_lens.paper.plan import expected_steps, plan


def test_the_paper_preset_keeps_the_papers_settings():
    runs = presets.study_runs("paper")
    ks = sorted(o["k"] for o in runs["scaling/d"].values())
    assert len(ks) >= 8 and ks[0] == 3 and ks[-1] == 36
    assert all(o["n_bases"] == 1000 for o in runs["scaling/d"].values())
    fixed_d = {(o["k"], o["k"] * o["n_bases"]) for o in runs["scaling/k"].values()}
    for d in (10_000, 20_000):
        assert {k for k, dd in fixed_d if abs(dd - d) <= 20} == {5, 10, 20, 36}
    lr = runs["noise/lr"].values()
    assert sorted(o.get("lr", 1e-3) for o in lr) == [3e-4, 5e-4, 1e-3, 2e-3, 5e-3]
    assert all(o["k"] == 20 and o["k"] * o["n_bases"] == 20_000 for o in lr)
    batch = runs["noise/batch_size"].values()
    assert sorted(o.get("batch_size", 128) for o in batch) == [64, 128, 256, 512]
    # batch sizes are evaluated every equal number of examples
    assert {o.get("eval_every", 50) * o.get("batch_size", 128) for o in batch} == {12_800}
    asym = runs["asymmetry"].values()
    assert sorted((o.get("direction", "bz_to_a"), o["seed"]) for o in asym) == sorted(
        (d, s) for d in ("bz_to_a", "a_to_b", "az_to_b") for s in (42, 43, 44)
    )
    assert len(runs["seeds"]) >= 3 and all(
        o["k"] == 10 and o["n_bases"] == 1000 for o in runs["seeds"].values()
    )


def test_a_run_two_studies_need_is_trained_once():
    runs = presets.study_runs("paper")
    base = "k10-nb1000-s42"
    for part in ("seeds", "scaling/d", "scaling/k", "asymmetry"):
        assert base in runs[part]
    assert "k20-nb1000-s42" in runs["noise/lr"] and "k20-nb1000-s42" in runs["noise/batch_size"]
    pool = presets.pool("paper")
    assert len(pool) == len({n for part in runs.values() for n in part})
    # the seeds and the Hessian's K = 20 run keep the default early stop (their post-τ checkpoints are read)
    assert "early_stop_evals" not in pool[base] and "early_stop_evals" not in pool["k20-nb1000-s42"]
    assert pool["k36-nb1000-s42"]["early_stop_evals"] == 3


def test_a_name_taken_by_other_settings_gets_its_study_appended():
    runs = presets.study_runs("cpu")
    # the asymmetry study's forward runs differ from the seeds' (steps, eval density)
    assert "k5-nb800-s1" in runs["seeds"] and "k5-nb800-s1-asymmetry" in runs["asymmetry"]
    assert runs["seeds"]["k5-nb800-s1"] != runs["asymmetry"]["k5-nb800-s1-asymmetry"]


def test_names_and_canonical_options():
    assert (
        presets.run_name(presets.canonical({"k": 20, "D": 20_000, "lr": 2e-3}))
        == "k20-nb1000-lr0.002-s42"
    )
    assert (
        presets.run_name(presets.canonical({"k": 10, "direction": "a_to_b", "seed": 43}))
        == "k10-nb1000-a_to_b-s43"
    )
    assert presets.canonical({"k": 10, "lr": 1e-3, "batch_size": 128}) == {
        "k": 10,
        "n_bases": 1000,
        "seed": 42,
    }
    with pytest.raises(SelectorLensError, match="unknown scale 'huge'"):
        presets.study_runs("huge")


def test_expected_tau_follows_the_papers_laws():
    base = presets.expected_tau({"k": 10, "n_bases": 1000})
    assert base == presets.TAU_REF
    assert presets.expected_tau({"k": 20, "n_bases": 1000}) == pytest.approx(base * 2**1.19)
    assert presets.expected_tau({"k": 20, "n_bases": 500}) == pytest.approx(
        base
    )  # flat in K at fixed D
    assert (
        presets.expected_tau({"k": 10, "n_bases": 1000, "lr": 5e-3}) is None
    )  # the paper: never escapes
    assert presets.expected_tau({"k": 10, "n_bases": 1000, "batch_size": 256}) == pytest.approx(
        base / 2
    )
    # budgets: 3x the expected τ at lr 1e-3, or at the run's own lr above it, in 500s; where
    # the paper says never (lr 5e-3), 3x what the lr law would predict
    lr_part = presets.study_runs("paper")["noise/lr"]
    tau_1e3 = presets.expected_tau({"k": 20, "n_bases": 1000})
    assert lr_part["k20-nb1000-lr0.0003-s42"]["steps"] == 11000 >= 3 * tau_1e3
    assert lr_part["k20-nb1000-s42"]["steps"] == 11000
    assert lr_part["k20-nb1000-lr0.002-s42"]["steps"] == 17500 >= 3 * tau_1e3 * 2**0.66
    assert lr_part["k20-nb1000-lr0.005-s42"]["steps"] == 32000 >= 3 * tau_1e3 * 5**0.66
    never = {"k": 20, "n_bases": 1000, "lr": 5e-3, "steps": 11000}
    assert expected_steps(never) == 11000
    assert expected_steps({"k": 10, "n_bases": 1000, "steps": 5000}) == int(
        presets.STOP_OVER_TAU * base
    )


def test_plan_adds_up_given_costs():
    runs = presets.pool("paper")
    shapes = {}
    for o in runs.values():
        from selector_lens.task.eval_set import resolve_eval_groups

        shapes[(o["k"], resolve_eval_groups(o.get("eval_groups", "auto"), o["n_bases"]))] = 1.0
    costs = {
        "step": {64: 0.05, 128: 0.1, 256: 0.2, 512: 0.4},
        "eval": shapes,
        "hvp_per_example": 0.001,
    }
    p = plan("paper", workers=2, costs=costs)
    rows = {r["run"]: r for r in p["runs"] if r["shared_with"] is None}
    assert len(rows) == len(runs)
    r = rows["k10-nb1000-s42"]
    steps = expected_steps(runs["k10-nb1000-s42"])
    assert r["wall_s"] == pytest.approx(steps * 0.1 + (steps // 50 + 1) * 1.0)
    shared = [x for x in p["runs"] if x["shared_with"]]
    assert shared and all(x["wall_s"] == 0 for x in shared)
    total = sum(x["wall_s"] for x in rows.values())
    assert total / 2 <= p["train_wall_s"] <= total / 2 + max(x["wall_s"] for x in rows.values())
    assert p["total_wall_s"] == pytest.approx(p["train_wall_s"] + sum(p["analyses_s"].values()))
    assert p["cuts"] and any("K at n_bases = 1000" in c for c in p["cuts"])


def test_a_run_has_one_name_its_config_gives():
    """Every preset run is named `TrainConfig.name` of its options (or that name with its
    study's suffix where another study took the name with other options)."""
    from selector_lens.config import from_options

    for scale in ("tiny", "cpu", "paper"):
        for runs in presets.study_runs(scale).values():
            for name, options in runs.items():
                assert name == from_options(options).name or name.startswith(
                    from_options(options).name + "-"
                ), name
