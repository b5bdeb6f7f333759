"""The two branching studies on a tiny parent: their tables come from the branches' own logs."""

import shutil

import pytest

import selector_lens as sl
from selector_lens.paper import verdicts
from selector_lens.paper.studies import interventions as iv
from tests.helpers import tiny


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
    out = tmp_path_factory.mktemp("iv") / "parent"
    run = sl.train(tiny(steps=200, ckpt_every=10, state_every=10), out=out)
    assert run.tau(), "the tiny parent must transition"
    return run


def test_necessity_table_branches_at_both_points_with_controls(parent, tmp_path):
    rows = iv.necessity_table(parent, tmp_path / "nec", seeds=(1, 2))
    tau = parent.tau()
    steps = sorted({r["step"] for r in rows})
    assert steps == [iv.nearest_state(parent, f * tau) for f in iv.NECESSITY_FRACTIONS]
    kinds = {r["change"] for r in rows}
    assert kinds == {
        "no change",
        "freeze routing",
        "ablate routing",
        "freeze control",
        "ablate control",
    }
    assert len(rows) == 2 * 5 * 2
    for r in rows:  # each row is its branch's own τ
        run = sl.Run.open(tmp_path / "nec" / f"step{r['step']}" / r["run"])
        assert run.tau() == r["tau"] and run.info["branch"]["step"] == r["step"]
        assert r["shift"] == (None if r["tau"] is None else r["tau"] - tau)
    routing = next(r for r in rows if r["change"] == "freeze routing")
    assert sl.Run.open(tmp_path / "nec" / f"step{routing['step']}" / routing["run"]).info["branch"][
        "freeze_heads"
    ] == [routing["head"]]
    assert verdicts.necessity(rows) in verdicts.VERDICTS
    again = iv.necessity_table(parent, tmp_path / "nec", seeds=(1, 2), train=False)
    assert again == rows  # read back from the published logs alone
    table = iv.summary(rows)
    assert len(table) == 10 and all(t["seeds"] == 2 for t in table)
    # published: the parent keeps no states and only the first point's branches have landed;
    # the later point is missing, not the first one counted twice
    from selector_lens.paper.publish import publish_run

    publish_run(parent, tmp_path / "pub")
    shutil.copytree(tmp_path / "nec" / f"step{steps[0]}", tmp_path / "part" / f"step{steps[0]}")
    half = iv.necessity_table(sl.Run.open(tmp_path / "pub"), tmp_path / "part", (1, 2), False)
    assert half == [r for r in rows if r["step"] == steps[0]]


def test_noise_table_scales_lr_and_batch(parent, tmp_path):
    rows = iv.noise_table(parent, tmp_path / "noise", seeds=(1,))
    cfg = parent.config
    by = {r["change"]: r for r in rows}
    assert by["lr x4"]["noise_scale"] == pytest.approx(4 * cfg.lr / cfg.batch_size)
    assert by["batch x4"]["noise_scale"] == pytest.approx(cfg.lr / (4 * cfg.batch_size))
    run = sl.Run.open(tmp_path / "noise" / f"step{by['batch x4']['step']}" / by["batch x4"]["run"])
    assert run.config.batch_size == 4 * cfg.batch_size
    assert any(r["tau"] for r in rows), "no branch escaped: the distances go unchecked"
    for r in rows:
        branch = sl.Run.open(tmp_path / "noise" / f"step{r['step']}" / r["run"])
        lr_x = branch.config.lr / cfg.lr  # the trained branch's own lr, against the parent's
        assert r["lr_x"] == pytest.approx(lr_x)
        assert r["remaining"] == (None if r["tau"] is None else r["tau"] - r["step"])
        assert r["distance"] == (None if r["tau"] is None else pytest.approx(r["remaining"] * lr_x))
    assert verdicts.noise_holds(rows) in verdicts.VERDICTS


def test_each_noise_branch_is_set_beside_the_same_change_from_step_0(parent, tmp_path):
    """`from_step_0` finds the sweep run with the branch's lr and batch size (and the parent's
    task, seed and schedule); a run that differs in anything else stands beside nothing."""
    cfg = parent.config
    doubled = sl.train(tiny(steps=60, lr=2 * cfg.lr), out=tmp_path / "lr2")
    other_seed = sl.train(tiny(steps=60, lr=cfg.lr / 2, seed=7), out=tmp_path / "half")
    wider = sl.train(tiny(steps=60, batch_size=4 * cfg.batch_size), out=tmp_path / "b4")
    found = iv.from_step_0(parent, [other_seed, doubled, wider, parent])
    assert set(found) == {"no change", "lr x2", "batch x4"}
    assert found["lr x2"] == {"run": "lr2", "tau": doubled.tau()}
    assert found["batch x4"]["run"] == "b4" and found["no change"]["run"] == parent.path.name


def test_noise_only_table_scales_the_noise_alone(parent, tmp_path):
    rows = iv.noise_only_table(parent, tmp_path / "only", seeds=(1, 2))
    cfg = parent.config
    assert sorted({r["noise_scale"] for r in rows}) == list(iv.NOISE_SCALES)
    assert len(rows) == len(iv.NOISE_SCALES) * 2
    assert any(r["tau"] for r in rows), "no branch escaped: the waits go unchecked"
    for r in rows:
        branch = sl.Run.open(tmp_path / "only" / f"step{r['step']}" / r["run"])
        assert branch.info["branch"]["noise_scale"] == r["noise_scale"]
        # the noise alone: the parent's lr and batch (so the same examples, in the same order)
        assert (branch.config.lr, branch.config.batch_size) == (cfg.lr, cfg.batch_size)
        assert r["remaining"] == (None if r["tau"] is None else r["tau"] - r["step"])
        assert r["examples"] == (None if r["tau"] is None else r["remaining"] * cfg.batch_size)
        assert 0 <= r["clip"] <= 1 and r["update_norm"] > 0 and r["noise_norm"] > 0
        # each record is the mean of the branch's logged rows up to its τ
        end = r["tau"] or r["final_step"]
        logged = [x["noise_clip"] for x in branch.metric_rows() if r["step"] < x["step"] <= end]
        assert r["clip"] == pytest.approx(sum(logged) / len(logged))
    assert verdicts.noise_only(rows) in verdicts.VERDICTS
    again = iv.noise_only_table(parent, tmp_path / "only", seeds=(1, 2), train=False)
    assert again == rows  # read back from the logs alone
    table = iv.summary(rows, ("noise_scale",))
    assert [t["noise_scale"] for t in table] == list(iv.NOISE_SCALES)
    assert all("drift" in t and "clip_max" in t for t in table)
