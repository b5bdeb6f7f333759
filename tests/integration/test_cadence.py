"""The adaptive cadence on trained runs: it changes which steps are evaluated and nothing else
(the weights, and every row it keeps, equal the dense run's), τ stays within one spacing, and a
killed adaptive run resumes to the same evaluations."""

from dataclasses import replace

import selector_lens as sl
from selector_lens.runs.rundir import CLOCK
from selector_lens.training.cadence import FLOOR
from tests.helpers import tiny, train_until_killed

CFG = tiny(steps=240, eval_every=10, ckpt_every=20, early_stop=False, lr=3e-3)


def test_adaptive_evaluates_fewer_grid_steps_and_changes_nothing_else(tmp_path):
    dense = sl.train(replace(CFG, eval_cadence="dense"), out=tmp_path / "dense")
    adaptive = sl.train(replace(CFG, eval_cadence="adaptive"), out=tmp_path / "adaptive")
    d = {r["step"]: r for r in dense.metric_rows()}
    a = {r["step"]: r for r in adaptive.metric_rows()}
    assert set(a) < set(d) and {0, 240} <= set(a)
    for step, row in a.items():  # the same numbers where both evaluated
        assert {k: v for k, v in row.items() if k not in CLOCK} == {
            k: v for k, v in d[step].items() if k not in CLOCK
        }
    assert all(s % (FLOOR * 10) == 0 or s in a for s in d if s % (FLOOR * 10) == 0)
    assert [sl.Run.open(r.path).steps for r in (dense, adaptive)] == [dense.steps] * 2
    from selector_lens.runs.store import checkpoint_checksum

    assert checkpoint_checksum(dense.ckpt_path(240)) == checkpoint_checksum(
        adaptive.ckpt_path(240)
    )  # evaluating fewer steps did not touch training
    assert dense.tau() is not None and 0 <= adaptive.tau() - dense.tau() <= 10


def test_a_killed_adaptive_run_resumes_to_the_same_evaluations(tmp_path, monkeypatch):
    full = sl.train(CFG, out=tmp_path / "full").metric_rows()
    train_until_killed(CFG, tmp_path / "k", monkeypatch, evals=len(full) - 3)
    resumed = sl.train(CFG, out=tmp_path / "k", resume=True).metric_rows()
    assert [r["step"] for r in resumed] == [r["step"] for r in full]
    assert [r["loss"] for r in resumed] == [r["loss"] for r in full]


def test_a_run_from_before_the_cadence_reads_as_dense(tmp_path):
    import json

    run = sl.train(tiny(steps=20, eval_cadence="dense"), out=tmp_path / "r")
    info = json.loads((run.path / "run.json").read_text())
    del info["config"]["eval_cadence"]
    (run.path / "run.json").write_text(json.dumps(info))
    assert sl.Run.open(run.path).config.eval_cadence == "dense"
