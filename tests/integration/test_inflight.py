"""tools/inflight.py: unfinished runs packed into a git ref come back in a workspace that kept
only .git, and resume exactly."""

import importlib.util
import shutil
import subprocess
from pathlib import Path

import selector_lens as sl
from selector_lens.config import from_options
from tests.helpers import TINY, logged, train_until_killed

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "inflight.py"


def _inflight():
    spec = importlib.util.spec_from_file_location("inflight", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_unfinished_run_survives_a_workspace_that_keeps_only_git(tmp_path, monkeypatch):
    inflight, ref = _inflight(), "refs/inflight/paper"
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    root = repo / "checkpoints" / "paper"
    cfg = from_options({**TINY, "k": 3, "n_bases": 6})
    killed = root / "runs" / "killed"
    train_until_killed(cfg, killed, monkeypatch, evals=4)  # dies at step 30, state at step 20
    sl.train(cfg, out=root / "runs" / "finished")
    assert inflight.state_step(killed) == 20

    assert inflight.save(root, ref, repo) == ["runs/killed at step 20"]
    shutil.rmtree(root)  # the next session: ignored folders gone
    assert inflight.restore(root, ref, repo) == ["runs/killed at step 20"]
    assert not (root / "runs" / "finished").exists()  # finished runs travel published
    assert inflight.restore(root, ref, repo) == []  # up to date: left alone
    branches = subprocess.run(["git", "branch"], cwd=repo, capture_output=True, text=True)
    assert branches.stdout == ""  # outside every branch

    resumed = sl.train(cfg, out=killed, resume=True).metric_rows()
    straight = sl.train(cfg, out=tmp_path / "straight").metric_rows()
    assert [r["loss"] for r in resumed] == [r["loss"] for r in straight]

    assert inflight.save(root, ref, repo) == []  # all finished: the pack goes, not to come back
    shutil.rmtree(root)
    assert inflight.restore(root, ref, repo) == [] and not root.exists()


def test_an_unfinished_branch_travels_too_and_resumes_exactly(tmp_path, monkeypatch):
    """A noise-scaled branch killed mid-way: packed under branches/, back, resumed (its ḡ read
    from the packed state) to the same evaluations as one trained straight through."""
    from selector_lens.training import trainer
    from selector_lens.training.branch import Changes, make_branch

    inflight, ref = _inflight(), "refs/inflight/paper"
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    root = repo / "checkpoints" / "paper"
    cfg = from_options(
        {**TINY, "k": 3, "n_bases": 6, "steps": 60, "ckpt_every": 10, "state_every": 10}
    )
    parent = sl.train(cfg, out=root / "runs" / "parent")
    spec = Changes(noise_scale=0.5)
    where = root / "branches" / "parent" / "step20" / "b"
    child = make_branch(parent, 20, where, spec)
    real, calls = trainer.evaluate, {"n": 0}

    def dies(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:  # step 40's evaluation: the state is step 30's
            raise KeyboardInterrupt
        return real(*a, **k)

    with monkeypatch.context() as m:
        m.setattr(trainer, "evaluate", dies)
        try:
            trainer.train_many([child], [where], resume=True)
        except KeyboardInterrupt:
            pass
    assert inflight.save(root, ref, repo) == ["branches/parent/step20/b at step 30"]
    shutil.rmtree(root)
    assert inflight.restore(root, ref, repo) == ["branches/parent/step20/b at step 30"]
    (resumed,) = trainer.train_many([child], [where], resume=True)
    straight = sl.train(cfg, out=tmp_path / "again")
    (whole,) = [sl.branch(straight, 20, tmp_path / "whole", noise_scale=0.5)]
    assert logged(resumed) == logged(whole)
