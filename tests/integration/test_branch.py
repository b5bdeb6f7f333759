"""Branching a run from a kept training state: exactness, each change, lineage, bad input."""

import json

import pytest
import torch

import selector_lens as sl
from selector_lens.model.adapter import tensors_checksum
from tests.helpers import cli, tiny


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
    assert child.metric_rows() == [
        {**r, "wall_s": c["wall_s"]} for r, c in zip(parent.metric_rows(), child.metric_rows())
    ]  # every logged number but the wall clock
    for step in (20, 40, 60):
        assert tensors_checksum(weights(child, step)) == tensors_checksum(weights(parent, step))
    info = child.info["branch"]
    assert info == {
        "parent": str(parent.path.resolve()),
        "step": 20,
        "changes": {},
        "reset_adam": False,
        "freeze_heads": [],
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


def test_lineage_walks_back_to_the_root(parent, tmp_path):
    child = sl.branch(parent, 20, tmp_path / "c", {"lr": "2e-3"})
    grandchild = sl.branch(child, 40, tmp_path / "g", {"lr": "1e-3"})
    assert [(r.path, s) for r, s in grandchild.lineage] == [
        (parent.path, None),
        (child.path, 20),
        (grandchild.path, 40),
    ]
    assert grandchild.parent.path == child.path and parent.parent is None
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
