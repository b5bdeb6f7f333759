"""The faults a hostile test found (issue 28), each as the input that showed it: a clear error
(one line, nothing lost) where there was a silent wrong answer."""

import json
import shutil

import pytest
import torch

import selector_lens as sl
from tests.helpers import TINY, cli, paper_folder, tiny


def flip_a_bit_of(path, tensor: torch.Tensor) -> None:
    """Flip one bit inside `tensor`'s bytes where they sit in the file at `path`."""
    raw = bytearray(path.read_bytes())
    at = raw.find(tensor.numpy().tobytes())
    assert at > 0, "tensor bytes not found in the file"
    raw[at + 5] ^= 0x10
    path.write_bytes(bytes(raw))


def test_a_flipped_bit_in_the_training_state_is_refused(tmp_path):
    cfg = tiny(steps=20)
    run = sl.train(cfg, out=tmp_path / "r")
    state = torch.load(run.state_path, weights_only=True)
    flip_a_bit_of(run.state_path, state["optimizer"]["state"][0]["exp_avg"])
    with pytest.raises(sl.SelectorLensError, match="last.pt .checksum mismatch"):
        sl.train(tiny(steps=40), out=tmp_path / "r", resume=True)


def test_a_lost_training_state_is_refused_and_restart_starts_over(tmp_path):
    run = sl.train(tiny(steps=40), out=tmp_path / "r")
    before = run.metric_rows()
    run.state_path.unlink()
    with pytest.raises(
        sl.SelectorLensError, match="missing but .* trained to step 40; pass --restart"
    ):
        sl.train(tiny(steps=60), out=tmp_path / "r", resume=True)
    assert run.metric_rows() == before  # nothing overwritten
    again = sl.train(tiny(steps=40), out=tmp_path / "r", restart=True)
    assert [r["step"] for r in again.metric_rows()] == [0, 10, 20, 30, 40]
    assert again.metric_rows()[-1]["loss"] == pytest.approx(before[-1]["loss"], abs=1e-6)


def test_a_run_json_edited_after_training_is_refused_on_resume(tmp_path):
    sl.train(tiny(steps=20), out=tmp_path / "r")
    info = json.loads((tmp_path / "r" / "run.json").read_text())
    info["config"]["lr"] = 0.01
    (tmp_path / "r" / "run.json").write_text(json.dumps(info))
    with pytest.raises(sl.SelectorLensError, match=r"lr: 0.003 \(trained\) != 0.01"):
        sl.train(tiny(steps=40, lr=0.01), out=tmp_path / "r", resume=True)


def test_a_checkpoint_copied_over_another_steps_name_is_refused(tmp_path):
    run = sl.train(tiny(steps=20), out=tmp_path / "r")
    shutil.copy(run.ckpt_path(0), run.ckpt_path(20))
    with pytest.raises(sl.SelectorLensError, match="holds step 0, not step 20"):
        run.model_at(20)


@pytest.mark.parametrize(
    "options,words",
    [
        ({"lr": float("inf")}, "lr must be a finite number, got inf"),
        ({"weight_decay": float("nan")}, "weight_decay must be a finite number, got nan"),
        ({"steps": True}, "steps must be an integer, got True"),
        ({"k": 3.7}, "k must be an integer, got 3.7"),
        ({"beta1": 5}, r"beta1 must lie in \[0, 1\), got 5"),
        ({"seed": -1}, "seed must be >= 0, got -1"),
        ({"data_seed": -3}, "seed must be >= 0, got -3"),
        ({"early_stop": 1}, "early_stop must be true or false, got 1"),
        ({"direction": 3}, "direction must be a string, got 3"),
    ],
)
def test_every_option_is_checked_for_type_and_finiteness(options, words):
    from selector_lens.config import from_options

    with pytest.raises(sl.SelectorLensError, match=words):
        from_options({"k": 3, "n_bases": 12, **options})


def test_an_integral_float_is_an_int_and_an_int_is_a_float():
    from selector_lens.config import from_options

    cfg = from_options({"k": 3.0, "n_bases": 12, "lr": 1})
    assert (cfg.task.k, type(cfg.task.k), cfg.lr, type(cfg.lr)) == (3, int, 1.0, float)


def test_a_diverging_run_stops_with_one_line_and_writes_no_nan(tmp_path):
    with pytest.raises(sl.SelectorLensError, match="diverged: loss nan at step"):
        sl.train(tiny(lr=1e30, grad_clip=0.0, steps=40), out=tmp_path / "r")
    text = (tmp_path / "r" / "metrics.jsonl").read_text()
    assert "NaN" not in text and "Infinity" not in text


def test_a_bad_grid_value_is_refused_before_anything_is_written(tmp_path):
    from selector_lens.training.sweep import SweepSpec, run_sweep

    spec = SweepSpec.from_dict({"base": {"k": 3, "n_bases": 12}, "grid": {"beta1": [0.9, 5]}})
    with pytest.raises(sl.SelectorLensError, match="beta1 must lie"):
        run_sweep(spec, tmp_path / "s")
    assert not (tmp_path / "s").exists()


BOMB = """base: {k: 3, n_bases: 12}
a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
grid: {seed: *e}
"""


@pytest.mark.parametrize(
    "text,words",
    [
        (BOMB, "uses a YAML alias"),
        ("grid: {seed: [" + "1, " * 40_000 + "1]}", "a spec is at most 65,536"),
        ("grid: {k: [3, 4]\n  bad", "is not valid YAML"),
        ("- 1\n- 2", "must be a mapping"),
        ("grid: [1, 2]", "base and grid map option names"),
        ("grid: {k: [[3, 4]]}", "k must be an integer, got \\[3, 4\\]"),
        ("grid: {1: [2]}", "unknown option\\(s\\): 1"),
        (
            "grid: {seed: " + str(list(range(101))) + ", k: " + str(list(range(1, 101))) + "}",
            "at most 10,000",
        ),
    ],
)
def test_a_hostile_sweep_spec_is_one_line_and_writes_nothing(tmp_path, text, words):
    from selector_lens.training.sweep import SweepSpec, run_sweep

    (tmp_path / "spec.yaml").write_text(text)
    with pytest.raises(sl.SelectorLensError, match=words):
        run_sweep(SweepSpec.load(tmp_path / "spec.yaml"), tmp_path / "s")
    assert not (tmp_path / "s").exists()


def test_every_executor_gets_absolute_run_paths(tmp_path, monkeypatch):
    """Ray's workers run elsewhere: a relative --out reached them relative to their own cwd."""
    from selector_lens.training.sweep import SweepSpec, run_sweep

    monkeypatch.chdir(tmp_path)
    spec = SweepSpec({**TINY, "k": 3, "n_bases": 6, "steps": 10}, {"seed": [1]})
    (result,) = run_sweep(spec, "rel", executor="batched")
    assert result["run"] == str(tmp_path / "rel" / "seed1") and result["outcome"] == "done"


def test_a_sweep_with_a_failed_point_exits_1_with_a_summary(tmp_path):
    out = tmp_path / "s"
    (out / "seed2").mkdir(parents=True)
    (out / "seed2" / "run.json").write_text("{}")  # not this run: the point fails
    spec = tmp_path / "spec.yaml"
    spec.write_text("base: {k: 3, n_bases: 6, steps: 10}\ngrid: {seed: [1, 2]}\n")
    res = cli("sweep", spec, "--out", out, "--executor", "batched", "--json")
    assert res.returncode == 1
    assert [r["outcome"] for r in json.loads(res.stdout)["results"]] == ["done", "failed"]
    assert "1 of 2 points failed (seed2)" in res.stderr


def test_a_second_sweep_on_a_directory_is_refused_by_name(tmp_path):
    from selector_lens.runs import rundir
    from selector_lens.training.sweep import SWEEP_LOCK, SweepSpec, run_sweep

    lock = rundir.Lock(tmp_path, SWEEP_LOCK, "is being swept by another process")
    try:
        with pytest.raises(sl.SelectorLensError, match=r"is being swept by another process \(pid"):
            run_sweep(SweepSpec({**TINY, "k": 3, "n_bases": 6}, {"seed": [1]}), tmp_path)
    finally:
        lock.release()
    assert not (tmp_path / "seed1").exists()


def test_what_a_child_process_prints_during_ray_goes_to_stderr(capfd):
    import subprocess
    import sys

    from selector_lens.training.sweep import _stdout_to_stderr

    with _stdout_to_stderr():
        subprocess.run([sys.executable, "-c", "print('raylet says hi')"], check=True)
        print("driver says hi")
    print("after")
    out, err = capfd.readouterr()
    assert out == "after\n" and "raylet says hi" in err and "driver says hi" in err


@pytest.mark.slow
def test_a_sweep_whose_worker_is_killed_finishes_every_point(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    spec = tmp_path / "s.yaml"
    spec.write_text(
        "base: {k: 3, n_bases: 12, steps: 400, n_layers: 1, d_model: 32, d_head: 16, "
        "d_mlp: 64, batch_size: 16, eval_every: 50, ckpt_every: 100, early_stop: false}\n"
        "grid: {seed: [1, 2]}\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "selector_lens", "sweep", spec, "--out", tmp_path / "s"]
        + ["--workers", "2", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    lock, metrics = (
        tmp_path / "s" / "seed1" / ".training.lock",
        tmp_path / "s" / "seed1" / "metrics.jsonl",
    )
    for _ in range(240):  # until seed 1's worker is training
        if (
            lock.is_file()
            and lock.read_text().strip()
            and metrics.is_file()
            and metrics.stat().st_size
        ):
            break
        time.sleep(0.25)
    os.kill(int(lock.read_text()), signal.SIGKILL)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert [r["outcome"] for r in json.loads(out)["results"]] == ["done", "done"]
    steps = [r["step"] for r in sl.Run.open(tmp_path / "s" / "seed1").metric_rows()]
    assert steps == list(range(0, 401, 50))  # resumed: every eval once


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_the_store_serves_nothing_for_a_damaged_checkpoint(tmp_path, damage):
    run = sl.train(tiny(steps=20), out=tmp_path / "r")
    first = sl.logit_lens(run)  # computed and stored
    assert sl.logit_lens(run).equals(first)  # served from the store
    path = run.ckpt_path(20)
    raw = bytearray(path.read_bytes())
    if damage == "flip":
        raw[-100] ^= 0x01  # inside the last tensor's bytes
    else:
        raw = raw[: len(raw) // 2]
    path.write_bytes(bytes(raw))
    with pytest.raises(sl.SelectorLensError, match=f"corrupt checkpoint: {path}"):
        sl.logit_lens(run)
    res = cli("weights", "--run", run.path, "--json")
    assert res.returncode == 2 and "corrupt checkpoint" in res.stderr


def test_a_published_file_edited_by_hand_is_named_and_not_read(tmp_path):
    from pathlib import Path

    published = Path(__file__).resolve().parents[2] / "analyses" / "results" / "paper"
    shutil.copytree(published, tmp_path / "p")
    run_json = tmp_path / "p" / "runs" / "k10-nb1000-s42" / "run.json"
    run_json.write_text(run_json.read_text().replace('"tau": 1500', '"tau": 1600', 1))
    res = cli("reproduce", "--from", tmp_path / "p", "-o", tmp_path / "r.html")
    assert res.returncode == 2
    assert "changed: runs/k10-nb1000-s42/run.json" in res.stderr
    assert not (tmp_path / "r.html").exists()


def test_a_full_disk_is_one_line_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    import errno

    from selector_lens.files import atomic_write_text

    def full(self, data):
        self.open("wb").write(data[:10])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(type(tmp_path), "write_bytes", full)
    with pytest.raises(
        sl.SelectorLensError,
        match=r"disk full writing .*x.json: it needs 2,000 bytes; [\d,]+ bytes free",
    ):
        atomic_write_text(tmp_path / "x.json", "a" * 2000)
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_while_checkpointing_keeps_the_run_resumable(tmp_path, monkeypatch):
    import errno

    from selector_lens.training import trainer

    real = trainer.save_weights
    calls = {"n": 0}

    def fills_up(model, path, step, chash):
        calls["n"] += 1
        if calls["n"] == 2:  # step 20's weights
            from selector_lens.files import atomic_write

            atomic_write(
                path,
                lambda tmp: (
                    tmp.write_bytes(b"x" * 10),
                    (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")),
                ),
            )
        return real(model, path, step, chash)

    monkeypatch.setattr(trainer, "save_weights", fills_up)
    with pytest.raises(sl.SelectorLensError, match="disk full writing .*step_000020.safetensors"):
        sl.train(tiny(steps=40), out=tmp_path / "r")
    assert not list((tmp_path / "r").rglob(".*.tmp"))
    monkeypatch.setattr(trainer, "save_weights", real)
    run = sl.train(tiny(steps=40), out=tmp_path / "r", resume=True)
    assert [r["step"] for r in run.metric_rows()] == [0, 10, 20, 30, 40]


@pytest.mark.parametrize(
    "kw,words",
    [
        ({"config": {"data": {"k": "abc"}}}, "data.k must be an integer, got 'abc'"),
        (
            {"config": {"data": {"k": [3]}, "training": {"learning_rate": "fast"}}},
            r"data.k must be an integer, got \[3\]; training.learning_rate must be a number",
        ),
        (
            {"config": {"model": {"d_model": 10_000_000}}},
            "embed.W_E is .*32.*the config says .*10000000",
        ),
        ({"history": "[1, 2]"}, "training_history.json is not a training history"),
        (
            {"history": '{"steps": [10], "train_lo'},
            "training_history.json is not a training history",
        ),
        ({"examples": '{"b": "abc", "z"\n'}, "examples.jsonl line 1 is not JSON"),
    ],
)
def test_a_hostile_import_folder_is_one_line_and_leaves_nothing(tmp_path, kw, words):
    from selector_lens.paper.importer import import_run

    folder = paper_folder(tmp_path / "paper", **kw)
    with pytest.raises(sl.SelectorLensError, match=words):
        import_run(folder, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["paper"]  # no half-made run


def test_an_import_killed_midway_leaves_nothing_and_imports_again(tmp_path, monkeypatch):
    from selector_lens.paper import importer

    folder = paper_folder(tmp_path / "paper")
    real = importer.read_paper_weights
    calls = {"n": 0}

    def dies(path):
        calls["n"] += 1
        if calls["n"] == 2:  # after the run directory was begun
            raise KeyboardInterrupt
        return real(path)

    monkeypatch.setattr(importer, "read_paper_weights", dies)
    with pytest.raises(KeyboardInterrupt):
        importer.import_run(folder, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["paper"]
    monkeypatch.setattr(importer, "read_paper_weights", real)
    run = importer.import_run(folder, tmp_path / "out")
    assert run.steps == [10]


def test_publish_refuses_to_replace_the_parent_of_published_branches(tmp_path):
    """Another training of a branching parent (here a tiny run under the K = 10 parent's name)
    would orphan the published branches: one line, exit 2, nothing written."""
    from pathlib import Path

    published = Path(__file__).resolve().parents[2] / "analyses" / "results" / "paper"
    shutil.copytree(published, tmp_path / "p")
    name = "k10-nb1000-st50-s42"
    assert (tmp_path / "p" / "branches" / name).is_dir()
    sl.train(tiny(steps=60, ckpt_every=50), out=tmp_path / "root" / "runs" / name)
    before = (tmp_path / "p" / "sha256sums.json").read_text()
    res = cli("publish", "--root", tmp_path / "root", "--out", tmp_path / "p")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert f"{name} is the parent of the published branches" in res.stderr
    assert (tmp_path / "p" / "sha256sums.json").read_text() == before
