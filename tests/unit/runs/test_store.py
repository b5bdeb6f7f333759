"""The analysis store: tables kept with the run, served only when their key matches."""

import shutil

import pytest
import torch

import selector_lens as sl
from selector_lens.analysis import ablation
from selector_lens.errors import SelectorLensError
from selector_lens.model.adapter import save_weights
from selector_lens.paper.publish import publish_run
from selector_lens.runs.store import STORE_DIR
from tests.helpers import tiny


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return sl.train(tiny(steps=40), out=tmp_path_factory.mktemp("store") / "r")


def counting(monkeypatch):
    calls = []
    real = ablation._ablation_table

    def spy(run, head_sets, mode, steps, keep_only, seed):
        calls.append(list(steps))
        return real(run, head_sets, mode, steps, keep_only, seed)

    monkeypatch.setattr(ablation, "_ablation_table", spy)
    return calls


def test_a_second_call_is_served_from_the_store(run, monkeypatch):
    first = sl.ablate_each_head(run, [20, 40], recompute=True)
    calls = counting(monkeypatch)
    again = sl.ablate_each_head(run, [40, 20])
    assert calls == []
    assert sorted(again.to_dict(orient="records"), key=str) == sorted(
        first.to_dict(orient="records"), key=str
    )
    assert len(list((run.path / STORE_DIR / "ablation").rglob("step_*.json"))) == 2
    sl.ablate_each_head(run, [20], recompute=True)
    assert calls == [[20]]
    sl.ablate_each_head(run, [0, 20])  # only the missing step is computed
    assert calls == [[20], [0]]


def test_an_analysis_killed_midway_keeps_the_steps_it_finished(run, monkeypatch):
    real = ablation._ablation_table

    def dies_at_40(run_, head_sets, mode, steps, keep_only, seed):
        if 40 in steps:
            raise RuntimeError("killed")
        return real(run_, head_sets, mode, steps, keep_only, seed)

    monkeypatch.setattr(ablation, "_ablation_table", dies_at_40)
    with pytest.raises(RuntimeError, match="killed"):
        sl.ablate_heads(run, [(0, 0)], "zero", [20, 40], seed=7)
    monkeypatch.setattr(ablation, "_ablation_table", real)
    calls = counting(monkeypatch)
    sl.ablate_heads(run, [(0, 0)], "zero", [20, 40], seed=7)
    assert calls == [[40]]  # step 20 was stored before the kill


def test_other_parameters_other_weights_or_another_version_are_recomputed(run, monkeypatch):
    sl.ablate_heads(run, [(0, 1)], "mean", [40])
    calls = counting(monkeypatch)
    sl.ablate_heads(run, [(0, 1)], "zero", [40])
    assert calls == [[40]]
    monkeypatch.setattr(ablation, "ABLATION_VERSION", "changed")
    sl.ablate_heads(run, [(0, 1)], "zero", [40])
    assert calls == [[40], [40]]
    monkeypatch.undo()
    calls = counting(monkeypatch)
    model = run.model_at(40)
    with torch.no_grad():
        model.blocks[0].attn.W_O[1].mul_(0.5)  # new weights under the same step: a stale key
    save_weights(model, run.ckpt_path(40), 40, run.config_hash)
    changed = sl.ablate_heads(run, [(0, 1)], "mean", [40])
    assert calls == [[40]]
    assert changed.ablated_loss.notna().all()


def test_a_copied_run_keeps_its_store_and_a_published_one_serves_it_without_weights(
    run, tmp_path, monkeypatch
):
    want = sl.ablate_each_head(run, [20])
    copy = sl.Run.open(shutil.copytree(run.path, tmp_path / "copy"))
    publish_run(run, tmp_path / "pub")
    published = sl.Run.open(tmp_path / "pub")
    calls = counting(monkeypatch)
    assert sl.ablate_each_head(copy, [20]).equals(want)
    assert sl.ablate_each_head(published, [20]).equals(want)
    assert calls == []
    assert published.steps == run.steps and published.tau() == run.tau()
    with pytest.raises(SelectorLensError, match="published run: its weights are not included"):
        published.model_at(20)
    with pytest.raises(SelectorLensError, match="published run"):
        sl.ablate_each_head(published, [0, 40], recompute=True)


def test_labelled_steps_are_the_phases_the_options_or_the_final_step(tmp_path):
    from tests.helpers import tiny

    run = sl.train(tiny(steps=40, early_stop=False), out=tmp_path / "r")
    assert run.labelled_steps(step=20) == [(None, 20)]
    assert run.labelled_steps(every=2) == [(None, 0), (None, 40)]
    with pytest.raises(SelectorLensError, match="at most one of --step, --phase, --every"):
        run.labelled_steps(step=20, every=2)
    if run.tau() is None:
        assert run.labelled_steps() == [("final", 40)]
    else:
        assert run.labelled_steps() == list(run.phases().items())


def test_latest_is_the_last_created_not_the_last_touched(tmp_path):
    import selector_lens as sl
    from selector_lens.runs import rundir
    from tests.helpers import tiny

    cfg = tiny()
    for name, created in (
        ("new", "2026-12-04T10:00:00+00:00"),
        ("old", "2026-12-01T10:00:00+00:00"),
    ):
        rundir.create(tmp_path / name, cfg.to_dict(), "0", {"bases": [], "zs": [], "targets": []})
        rundir.update(tmp_path / name, created=created)
    rundir.update(tmp_path / "old", status="finished")  # touched last: its mtime is the newest
    assert sl.Run.latest(tmp_path).path.name == "new"


def test_progress_without_a_terminal_is_plain_lines(capsys):
    from selector_lens.runs.progress import tracked

    assert list(tracked([1, 2, 3], "checkpoints", every_s=0.0)) == [1, 2, 3]
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "checkpoints: 0/3" and err[-1].startswith("checkpoints: 3/3 in ")
    assert any("s left" in line for line in err[1:-1])  # an estimate on the way


def test_an_analysis_reports_its_progress_once_over_the_steps_it_computes(run, capsys):
    """Computed one checkpoint at a time, it is one progress line per analysis (named), not a
    0/1 ... 1/1 pair per checkpoint."""
    shown = sl.Run.open(run.path, progress=True)
    sl.ablate_each_head(shown, [0, 20, 40], recompute=True)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "ablation: checkpoints: 0/3" and err[-1].startswith(
        "ablation: checkpoints: 3/3"
    )
    assert not any("/1" in line for line in err)
    sl.ablate_each_head(shown, [0, 20, 40])  # served from the store: nothing to report
    assert capsys.readouterr().err == ""


def test_a_reader_beside_a_writing_process_never_sees_half_a_table(run, tmp_path):
    """`analyze` in another process fills a copy's store while this one reads every stored file
    as it appears: each parses whole (they are written beside and renamed into place), and at
    the end the reader's tables are the writer's."""
    import json
    import subprocess
    import sys

    copy = tmp_path / "copy"
    shutil.copytree(run.path, copy)
    shutil.rmtree(copy / STORE_DIR, ignore_errors=True)
    code = f"import selector_lens as sl; sl.analyze(sl.Run.open({str(copy)!r}))"
    writer = subprocess.Popen([sys.executable, "-c", code])
    seen = 0
    while True:
        done = writer.poll() is not None
        for path in (copy / STORE_DIR).rglob("*.json"):
            try:
                json.loads(path.read_text())  # whole, or not there yet
                seen += 1
            except FileNotFoundError:
                pass
        if done:
            break
    assert writer.returncode == 0 and seen > 0
    assert not list((copy / STORE_DIR).rglob("*.tmp*"))  # nothing half-written left behind
