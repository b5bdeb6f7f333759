"""Branching a run from a kept training state: exactness, each change, lineage, bad input."""

import json

import pytest
import torch

import selector_lens as sl
from selector_lens.model.adapter import tensors_checksum
from tests.helpers import cli, logged, tiny


def weights(run, step):
    return {k: v.clone() for k, v in run.model_at(step).state_dict().items()}


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
    """60 steps, a checkpoint every 10 and a training state every 20 (0, 20, 40, 60)."""
    out = tmp_path_factory.mktemp("parent") / "p"
    return sl.train(tiny(steps=60, ckpt_every=10, state_every=20, early_stop=False), out=out)


def test_states_are_kept_on_their_schedule(parent):
    assert parent.state_steps == [0, 20, 40, 60]
    assert parent.steps == list(range(0, 61, 10))
    state = torch.load(parent.state_path_at(20), weights_only=True)
    assert state["step"] == 20 and state["optimizer"]["state"]  # AdamW's moments


def test_a_branch_with_no_change_continues_bit_for_bit(parent, tmp_path):
    child = sl.branch(parent, 20, tmp_path / "same")
    assert logged(child) == logged(parent)  # every logged number but the wall clock
    for step in (20, 40, 60):
        assert tensors_checksum(weights(child, step)) == tensors_checksum(weights(parent, step))
    info = child.info["branch"]
    assert (child.path / info["parent"]).resolve() == parent.path.resolve()  # relative to it
    assert info == {
        "parent": info["parent"],
        "step": 20,
        "changes": {},
        "reset_adam": False,
        "freeze_heads": [],
        "reinit_heads": [],
        "ablate_heads": [],
        "ablate_mode": "mean",
        "z": None,
    }
    assert child.state_steps == [20, 40, 60]  # the child keeps states on its own schedule


def test_a_changed_option_changes_only_what_comes_after(parent, tmp_path):
    child = sl.branch(parent, 20, tmp_path / "lr", {"lr": "1e-2"})
    assert child.config.lr == 1e-2 and child.info["branch"]["changes"] == {"lr": "1e-2"}
    before = [r for r in child.metric_rows() if r["step"] <= 20]
    assert [r["loss"] for r in before] == [
        r["loss"] for r in parent.metric_rows() if r["step"] <= 20
    ]
    after = {r["step"]: r["loss"] for r in child.metric_rows() if r["step"] > 20}
    assert after and all(
        after[s] != r["loss"] for r in parent.metric_rows() if (s := r["step"]) in after
    )
    assert [r["lr"] for r in child.metric_rows() if r["step"] > 20] == [1e-2] * 4


def test_reset_adam_starts_the_moments_afresh(parent, tmp_path):
    child = sl.branch(parent, 20, tmp_path / "reset", reset_adam=True)
    state = torch.load(child.state_path_at(40), weights_only=True)
    # a fresh AdamW counts its steps from the branch: 20 of them by step 40
    assert all(float(s["step"]) == 20 for s in state["optimizer"]["state"].values())
    assert tensors_checksum(weights(child, 40)) != tensors_checksum(weights(parent, 40))


def test_a_frozen_head_gets_no_update_and_the_others_do(parent, tmp_path):
    child = sl.branch(parent, 20, tmp_path / "frozen", freeze_heads=["L0H1"])
    start, end = weights(child, 20), weights(child, 60)
    for name in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V"):
        key = f"blocks.0.attn.{name}"
        assert torch.equal(start[key][1], end[key][1]), name  # weight decay included
        assert not torch.equal(start[key][0], end[key][0]), name  # head 0 trains
    assert not torch.equal(start["blocks.1.attn.W_Q"], end["blocks.1.attn.W_Q"])


def test_a_changed_weight_decay_reaches_the_optimizer(parent, tmp_path):
    child = sl.branch(parent, 20, tmp_path / "wd", weight_decay=0.5)
    state = torch.load(child.state_path_at(40), weights_only=True)
    assert state["optimizer"]["param_groups"][0]["weight_decay"] == 0.5
    assert tensors_checksum(weights(child, 40)) != tensors_checksum(weights(parent, 40))


def test_sgd_with_momentum_starts_without_adam_moments(parent, tmp_path):
    child = sl.branch(parent, 20, tmp_path / "sgd", optimizer="sgd", momentum="0.9", lr="0.1")
    state = torch.load(child.state_path_at(40), weights_only=True)
    group = state["optimizer"]["param_groups"][0]
    assert group["momentum"] == 0.9 and group["lr"] == 0.1
    moments = next(iter(state["optimizer"]["state"].values()))
    assert set(moments) == {"momentum_buffer"}  # SGD's, none of AdamW's


def test_a_reinitialised_head_is_drawn_again_at_the_branch(parent, tmp_path):
    child = sl.branch(parent, 20, tmp_path / "reinit", reinit_heads=["L1H0"], steps=30)
    mine, theirs = weights(child, 20), weights(parent, 20)
    for name in ("W_Q", "W_O"):
        key = f"blocks.1.attn.{name}"
        assert not torch.equal(mine[key][0], theirs[key][0])
        assert torch.equal(mine[key][1], theirs[key][1])  # the other head untouched
        std = child.model_at(20).cfg.initializer_range
        assert mine[key][0].std().item() == pytest.approx(std, rel=0.3)
    assert torch.equal(mine["blocks.1.attn.b_Q"][0], torch.zeros_like(mine["blocks.1.attn.b_Q"][0]))
    # the parent's own file is untouched (the child's was a link until it was rewritten)
    assert tensors_checksum(theirs) == tensors_checksum(weights(sl.Run.open(parent.path), 20))


def test_an_ablated_head_trains_and_evaluates_ablated(parent, tmp_path):
    from selector_lens.analysis.ablation import head_ablation
    from selector_lens.model.metrics import evaluate

    child = sl.branch(
        parent, 20, tmp_path / "abl", ablate_heads=["L0H0"], ablate_mode="zero", reset_adam=True
    )
    start, end = weights(child, 20), weights(child, 60)
    # no gradient reaches a zeroed head's Q, K and V: with fresh moments only weight decay
    # moves them
    decay = (1 - 3e-3 * 0.01) ** 40
    key = "blocks.0.attn.W_Q"
    assert torch.allclose(end[key][0], start[key][0] * decay, atol=1e-7)
    assert not torch.allclose(end[key][1], start[key][1] * decay, atol=1e-7)
    # its logged evaluation is the ablated model's
    model, es = child.model_at(60), child.eval_set()
    ablated = evaluate(model, es, intervention=head_ablation(model, es, [(0, 0)], "zero"))
    assert child.metric_rows()[-1]["loss"] == pytest.approx(ablated["loss"], abs=1e-6)


def test_mean_ablation_stores_the_training_set_means(parent, tmp_path):
    from safetensors.torch import load_file

    child = sl.branch(parent, 20, tmp_path / "mean", ablate_heads=["L1H1"], steps=30)
    (values,) = load_file(str(child.path / "ablation.safetensors")).values()
    model, tokens = parent.model_at(20), parent.task_data.tokens
    _, cache = model.run_with_cache(tokens, names_filter="blocks.1.attn.hook_z")
    want = cache["blocks.1.attn.hook_z"][:, :, 1].mean(0)  # TransformerLens's own forward
    assert torch.allclose(values, want, atol=1e-5)


@pytest.mark.parametrize("mode", ["drop", "permute"])
def test_z_changes_take_the_selector_away_in_training_only(parent, tmp_path, mode):
    from selector_lens.task.vocab import PAD
    from selector_lens.training.interventions import without_z

    task, tokens = parent.config.task, parent.task_data.tokens
    index = torch.arange(len(tokens))
    batch = without_z(tokens, index, task, mode, seed=1, step=7)
    pos = task.z_positions
    other = [p for p in range(tokens.shape[1]) if p not in pos]
    assert torch.equal(batch[:, other], tokens[:, other])  # only z changes
    if mode == "drop":
        assert (batch[:, pos] == PAD).all()
    else:  # each z is one of its own group's K, and they no longer follow the target
        k = task.k
        group_z = tokens[:, pos].view(-1, k, len(pos))
        for e in range(len(tokens)):
            assert (group_z[e // k] == batch[e, pos]).all(-1).any()
        assert not torch.equal(batch[:, pos], tokens[:, pos])
        assert torch.equal(batch, without_z(tokens, index, task, mode, seed=1, step=7))
    child = sl.branch(parent, 20, tmp_path / mode, z=mode, steps=30)
    assert child.info["branch"]["z"] == mode and child.eval_set().tokens.equal(
        parent.eval_set().tokens
    )  # evaluated on the true task


def test_branches_train_together_and_match_branching_one_by_one(parent, tmp_path):
    runs = sl.branches(parent, 20, tmp_path / "many", [{}, {"lr": "1e-2"}], seeds=[7, 8])
    assert [r.path.name for r in runs] == ["same-s7", "same-s8", "lr1e-2-s7", "lr1e-2-s8"]
    alone = sl.branch(parent, 20, tmp_path / "alone", lr="1e-2", seed=8)
    # one batched model sums in another order than one model alone: equal to float precision
    assert [r["loss"] for r in runs[3].metric_rows()] == pytest.approx(
        [r["loss"] for r in alone.metric_rows()], rel=1e-4
    )
    assert runs[0].metric_rows()[-1]["loss"] != runs[1].metric_rows()[-1]["loss"]  # other orders


def test_lineage_walks_back_to_the_root(parent, tmp_path):
    child = sl.branch(parent, 20, tmp_path / "c", {"lr": "2e-3"})
    grandchild = sl.branch(child, 40, tmp_path / "g", {"lr": "1e-3"})
    assert [(r.path.resolve(), s) for r, s in grandchild.lineage] == [
        (parent.path.resolve(), None),
        (child.path.resolve(), 20),
        (grandchild.path.resolve(), 40),
    ]
    assert grandchild.parent.path == child.path.resolve() and parent.parent is None
    assert grandchild.metric_rows()[:3] == parent.metric_rows()[:3]  # the root's history


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"step": 30}, r"no training state at step 30; nearest steps with one: 20, 40 \("),
        ({"changes": {"k": "5"}}, r"keeps the parent's task and model; 'k' cannot change"),
        ({"changes": {"d_model": "64"}}, r"'d_model' cannot change"),
        ({"changes": {"colour": "red"}}, r"unknown option 'colour'"),
        ({"changes": {"steps": "20"}}, r"starts at step 20 but its budget is 20 steps"),
        ({"freeze_heads": ["L0H7"]}, r"head 7 out of range: the model has heads 0..1"),
        ({"freeze_heads": ["head3"]}, r"L<layer>H<head>"),
        ({"z": "shuffle"}, r"unknown z change 'shuffle'"),
        ({"ablate_heads": ["L0H0"], "ablate_mode": "resample"}, r"zero or mean"),
    ],
)
def test_bad_branches_are_refused_before_anything_is_written(parent, tmp_path, kw, match):
    args = {"step": 20, "changes": None, **kw}
    out = tmp_path / "bad"
    with pytest.raises(sl.SelectorLensError, match=match):
        sl.branch(parent, args.pop("step"), out, **args)
    assert not out.exists()


def test_branch_from_the_command_line(parent, tmp_path):
    out = cli(
        "branch",
        "--from",
        str(parent.path),
        "--step",
        "40",
        "--out",
        str(tmp_path / "b"),
        "--set",
        "weight_decay=0.1",
        "--freeze-head",
        "L1H0",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["branch"]["step"] == 40 and summary["branch"]["freeze_heads"] == ["L1H0"]
    assert sl.Run.open(tmp_path / "b").config.weight_decay == 0.1
    bad = cli("branch", "--from", str(parent.path), "--step", "5", "--out", str(tmp_path / "x"))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "nearest steps with one: 0, 20 (" in bad.stderr
    bad = cli(
        "branch",
        "--from",
        str(parent.path),
        "--step",
        "20",
        "--out",
        str(tmp_path / "y"),
        "--set",
        "lr",
    )
    assert bad.returncode == 2 and "--set takes NAME=VALUE" in bad.stderr


def test_a_branch_is_whole_or_absent(parent, tmp_path, monkeypatch):
    from selector_lens.training import branch as branching

    def dies(*a, **k):
        raise KeyboardInterrupt  # killed while writing the branch's state

    monkeypatch.setattr(branching, "state_for", dies)
    with pytest.raises(KeyboardInterrupt):
        sl.branch(parent, 20, tmp_path / "b")
    assert list(tmp_path.iterdir()) == []  # neither the branch nor its partial directory
    monkeypatch.undo()
    sl.branch(parent, 20, tmp_path / "b", steps=30)
    with pytest.raises(sl.SelectorLensError, match="already holds a run"):
        sl.branch(parent, 20, tmp_path / "b", steps=30)


def test_state_every_must_fit_the_checkpoints():
    with pytest.raises(sl.SelectorLensError, match="multiple of ckpt_every"):
        tiny(ckpt_every=10, state_every=25)
    assert tiny(ckpt_every=30).states_at == 270  # the default, rounded up to a checkpoint
    assert tiny(ckpt_every=10, state_every=0).states_at == 0


def test_prune_drops_a_state_with_its_weights(tmp_path):
    run = sl.train(
        tiny(steps=80, ckpt_every=10, state_every=10, early_stop=False), out=tmp_path / "r"
    )
    if run.tau() is None:
        pytest.skip("this tiny run did not transition: prune needs a τ")
    plan = run.prune((0.5, 1.0), thin_every=100, dry_run=False)
    assert plan["drop"] and plan["states_dropped"] == len(plan["drop"])
    assert set(run.state_steps) == set(run.steps)


def test_a_sweep_spec_branch_block_grids_over_changes_and_seeds(parent, tmp_path):
    from selector_lens.training.sweep import SweepSpec, run_sweep

    spec = SweepSpec.from_dict(
        {
            "branch": {"from": str(parent.path), "step": 40},
            "base": {"reset_adam": True},
            "grid": {"freeze_heads": [[], "L0H0"], "seed": [1, 2]},
        }
    )
    results = run_sweep(spec, tmp_path / "sw", executor="batched")
    assert [r["outcome"] for r in results] == ["done"] * 4
    names = sorted(p.name for p in (tmp_path / "sw").iterdir() if p.is_dir())
    assert names == ["L0H0-seed1", "L0H0-seed2", "no_freeze_heads-seed1", "no_freeze_heads-seed2"]
    child = sl.Run.open(tmp_path / "sw" / "L0H0-seed2")
    record = child.info["branch"]
    assert record["step"] == 40 and record["freeze_heads"] == ["L0H0"] and record["reset_adam"]
    assert child.config.seed == 2
    assert [r for r, _ in child.lineage][0].path == parent.path.resolve()
    again = run_sweep(spec, tmp_path / "sw", executor="batched")  # made once, then finished
    assert [r["outcome"] for r in again] == ["skipped"] * 4
    with pytest.raises(sl.SelectorLensError, match="needs a branch: block"):
        SweepSpec.from_dict({"grid": {"z": ["drop"]}}).points()
    with pytest.raises(sl.SelectorLensError, match=r"branch is \{from: RUN, step: STEP\}"):
        SweepSpec.from_dict({"branch": {"from": "x"}, "grid": {}})


def test_the_dashboard_finds_a_parents_branches_and_overlays_them(parent, tmp_path):
    # a copy of the parent's tree, so only this test's branches sit beside it
    import shutil

    from selector_lens.analysis.tables import gather
    from selector_lens.viz.dashboard import run_dashboard

    root = tmp_path / "tree"
    shutil.copytree(parent.path, root / "p")
    mine = sl.Run.open(root / "p")
    a = sl.branch(mine, 20, root / "a", lr="1e-2", steps=40)
    b = sl.branch(mine, 40, root / "b", freeze_heads=["L1H1"])
    assert [c.path.name for c in mine.children()] == ["a", "b"]
    assert a.children() == [] and [c.path.name for c in b.parent.children()] == ["a", "b"]
    t = gather(mine, ablation=False, patch_steps=0, explorer_steps=0, lens_steps=0)
    (first, second) = t.branches
    assert (
        first["step"] == 20
        and first["label"] == "lr=1e-2, steps=40"
        and first["rows"][0]["step"] == 20
    )
    assert second["heads"] == ["L1H1"] and second["label"] == "freeze L1H1"
    from selector_lens.viz import figures

    fig = figures.branch_overlay(t.metrics, t.branches, t.log_k)
    names = [d.name for d in fig.data]
    assert "parent" in names and any(n.startswith("b (step 40: freeze L1H1)") for n in names)
    assert "L1H1: parent" in names  # the changed head's attention, the parent's beside it
    page = run_dashboard(mine, tmp_path / "d.html").read_text()
    assert "Branches of this run" in page
    child = gather(b, ablation=False, patch_steps=0, explorer_steps=0, lens_steps=0)
    assert dict(child.summary)["branched from"].endswith("at step 40")
