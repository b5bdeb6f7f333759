import json

import pandas as pd
import pytest

import selector_lens as sl
from selector_lens.config import from_options
from selector_lens.runs import rundir
from selector_lens.runs.run import run_table
from selector_lens.runs.transition import nominal_d, scaling_fits
from selector_lens.training.sweep import SweepSpec, run_point, run_sweep, worker_threads
from tests.helpers import TINY, train_until_killed


def test_from_options_from_flat_options():
    cfg = from_options(
        {"k": 4, "D": 40, "n_layers": 2, "lr": 2e-3, "seed": 7, "direction": "a_to_b"}
    )
    assert (cfg.task.k, cfg.task.n_bases, cfg.task.seed, cfg.task.direction) == (4, 10, 7, "a_to_b")
    assert (cfg.model.n_layers, cfg.lr, cfg.seed) == (2, 2e-3, 7)
    assert from_options({"k": 36, "D": 10_000}).task.n_bases == 278  # round(D / K): D = 10,008
    with pytest.raises(sl.SelectorLensError, match="D or n_bases, not both"):
        from_options({"k": 4, "D": 30, "n_bases": 3})
    with pytest.raises(sl.SelectorLensError, match="unknown option.*: colour"):
        from_options({"colour": 1})


def test_spec_from_yaml_and_flags(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("base:\n  steps: 40\n  k: 3\ngrid:\n  n_bases: [6, 12]\n  seed: 1\n")
    spec = SweepSpec.load(path).with_grid(["lr=0.001,3e-3"])
    pts = spec.points()
    assert len(pts) == 4 and {p["lr"] for p in pts} == {0.001, 0.003}
    assert spec.run_name(pts[0]) == "n_bases6-seed1-lr0.001"
    with pytest.raises(sl.SelectorLensError, match="k must be >= 1"):
        SweepSpec({}, {"k": [0, 3]}).points()  # invalid points fail before anything runs
    with pytest.raises(sl.SelectorLensError, match="--grid takes key=v1,v2"):
        spec.with_grid(["lr"])
    path.write_text("grid: [unclosed")
    with pytest.raises(sl.SelectorLensError, match="not valid YAML"):
        SweepSpec.load(path)


BLOCKED = "corrupt checkpoint"


def block(path, options):
    """A point killed mid-write: its run directory with a torn optimizer state, so resuming it
    fails at training time, on any hardware."""
    cfg = from_options(options)
    rundir.create(path, cfg.to_dict(), sl.__version__, cfg.task.generate().to_json())
    (path / rundir.CKPT_DIR / rundir.STATE).write_bytes(b"torn")


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    spec = SweepSpec({**TINY, "k": 3}, {"n_bases": [6, 12], "seed": [1, 2]})
    block(root / "n_bases6-seed2", {**TINY, "k": 3, "n_bases": 6, "seed": 2})
    block(root / "n_bases12-seed2", {**TINY, "k": 3, "n_bases": 12, "seed": 2})
    return root, spec, run_sweep(spec, root, workers=2)


@pytest.mark.slow
def test_local_sweep_records_failures_and_goes_on(swept):
    root, spec, results = swept
    outcome = {r["run"].split("/")[-1]: r for r in results}
    assert {k: v["outcome"] for k, v in outcome.items()} == {
        "n_bases6-seed1": "done",
        "n_bases12-seed1": "done",
        "n_bases6-seed2": "failed",
        "n_bases12-seed2": "failed",
    }
    err = json.loads((root / "n_bases6-seed2" / "error.json").read_text())
    assert BLOCKED in err["error"] and "Traceback" in err["traceback"]
    assert sl.Run.open(root / "n_bases12-seed1").metric_rows()[-1]["step"] == 40
    assert len(json.loads((root / "sweep.json").read_text())["points"]) == 4


@pytest.mark.slow
def test_a_cuda_point_trains_where_cuda_exists_and_fails_alone_where_not(tmp_path):
    import torch

    res = run_sweep(
        SweepSpec({**TINY, "k": 3, "n_bases": 6, "steps": 10}, {"device": ["cpu", "cuda"]}),
        tmp_path,
    )
    if torch.cuda.is_available():
        assert [r["outcome"] for r in res] == ["done", "done"]
    else:
        assert [r["outcome"] for r in res] == ["done", "failed"] and "no CUDA device" in res[1][
            "error"
        ]


def test_sweep_is_resumable(swept):
    root, spec, _ = swept
    again = run_sweep(spec, root, workers=1)
    assert [r["outcome"] for r in again if "seed1" in r["run"]] == ["skipped", "skipped"]
    with pytest.raises(sl.SelectorLensError, match="holds a different sweep"):
        run_sweep(SweepSpec({**TINY, "k": 3}, {"n_bases": [6]}), root)


def test_a_killed_point_is_resumed(tmp_path, monkeypatch):
    options = {**TINY, "k": 3, "n_bases": 6}
    train_until_killed(from_options(options), tmp_path / "p", monkeypatch, evals=4)
    threads = __import__(
        "torch"
    ).get_num_threads()  # all three parts on one thread count: same floats
    assert run_point(options, str(tmp_path / "p"), threads)["outcome"] == "done"
    full = sl.train(from_options(options), out=tmp_path / "full").metric_rows()
    assert [r["loss"] for r in sl.Run.open(tmp_path / "p").metric_rows()] == [
        r["loss"] for r in full
    ]


def test_a_finished_run_whose_budget_grew_is_trained_on(tmp_path):
    options, out = {**TINY, "k": 3, "n_bases": 6}, tmp_path / "p"
    threads = __import__("torch").get_num_threads()
    assert run_point({**options, "steps": 20}, str(out), threads)["outcome"] == "done"
    assert rundir.status(out) == rundir.FINISHED and not rundir.is_done(out, 40)
    assert run_point(options, str(out), threads)["outcome"] == "done"  # 20 -> 40 steps
    full = sl.train(from_options(options), out=tmp_path / "full").metric_rows()
    assert [r["loss"] for r in sl.Run.open(out).metric_rows()] == [r["loss"] for r in full]
    assert run_point(options, str(out), threads)["outcome"] == "skipped"
    rundir.update(out, status=rundir.EARLY_STOPPED)  # stopped early: done whatever the budget
    assert rundir.is_done(out, 1000) and rundir.is_done(out)


@pytest.mark.parametrize(
    "omp, cores, workers, want",
    [
        (None, 2, 1, 2),
        (None, 16, 4, 4),
        (None, 2, 4, 1),
        ("1", 2, 1, 1),
        ("8", 16, 2, 8),
        ("", 2, 1, 2),
    ],
)
def test_worker_threads_share_the_cores_under_the_users_cap(monkeypatch, omp, cores, workers, want):
    if omp is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", omp)
    assert worker_threads(cores, workers) == want


def test_scaling_fits_on_an_exact_law():
    rows = [
        {"run": f"r{i}", "k": k, "D": d, "tau": 0.05 * d**1.2}
        for i, (k, d) in enumerate(
            [(3, 300), (5, 1000), (10, 1000), (20, 1000), (10, 4000), (10, 10000), (36, 10008)]
        )
    ]
    fits = scaling_fits(pd.DataFrame(rows))
    assert fits["tau_vs_D"]["alpha"] == pytest.approx(1.2)
    assert fits["tau_vs_K"][1000]["alpha"] == pytest.approx(0.0, abs=1e-9)
    # K = 36 at D = 10,000 has 278 bases (10,008 examples): the same fixed-D series as K = 10
    assert fits["tau_vs_K"][10000]["n"] == 2 and set(fits["tau_vs_K"]) == {1000, 10000}
    assert nominal_d(10008) == 10000 and nominal_d(1250) == 1250 and nominal_d(20016) == 20000
    assert fits["k_beyond_D"] == pytest.approx(0.0, abs=1e-9)


def test_run_table_of_the_sweep(swept):
    root, _, _ = swept
    table = run_table(root)
    ok = table[table.status != "running"]
    assert set(ok.D) == {18, 36} and (ok.tau_examples.dropna() > 0).all()
    failed = table[table.error.notna()]
    assert sorted(failed.run.str.split("/").str[-1]) == ["n_bases12-seed2", "n_bases6-seed2"]
    assert failed.error.str.contains(BLOCKED).all()


@pytest.mark.slow
@pytest.mark.ray
def test_ray_executor_on_a_local_instance(tmp_path):
    pytest.importorskip("ray")
    spec = SweepSpec({**TINY, "k": 3}, {"n_bases": [6, 12]})
    results = run_sweep(spec, tmp_path, executor="ray", workers=2)
    assert [r["outcome"] for r in results] == ["done", "done"]
    local = run_sweep(spec, tmp_path / "local", workers=2)
    for r, l in zip(results, local):  # same runs, same numbers, whichever executor
        a, b = sl.Run.open(r["run"]).metric_rows(), sl.Run.open(l["run"]).metric_rows()
        assert [x["loss"] for x in a] == [x["loss"] for x in b]


@pytest.mark.slow
def test_killing_a_sweep_leaves_no_worker_behind(tmp_path):
    """A killed sweep must not leave workers writing into run directories a resumed one reopens."""
    import signal
    import subprocess
    import sys
    import time

    spec = tmp_path / "s.yaml"
    spec.write_text(
        "base: {k: 3, n_bases: 12, steps: 100000, n_layers: 1, d_model: 32, d_head: 16, "
        "d_mlp: 64, batch_size: 16, eval_every: 50, ckpt_every: 1000, early_stop: false}\n"
        "grid: {seed: [1, 2]}\n"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "selector_lens",
            "sweep",
            str(spec),
            "--out",
            str(tmp_path / "s"),
            "--workers",
            "2",
            "--json",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    metrics = tmp_path / "s" / "seed1" / "metrics.jsonl"
    for _ in range(120):  # wait until the workers are training
        if metrics.is_file() and metrics.stat().st_size > 0:
            break
        time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(3)
    size = metrics.stat().st_size
    time.sleep(3)
    assert metrics.stat().st_size == size  # nothing is still training


@pytest.mark.slow
def test_batched_executor_trains_compatible_points_together(tmp_path, monkeypatch):
    """Two seeds and three K (same shapes; D = 16, 24, 32 at batch 16: K=3's epochs end in a
    batch of 8) in one batched model; a point that fails, fails alone."""
    from selector_lens.training import trainer

    widths, real = [], trainer.train_step
    monkeypatch.setattr(
        trainer, "train_step", lambda models, *a: widths.append(len(models)) or real(models, *a)
    )
    spec = SweepSpec({**TINY, "n_bases": 8}, {"k": [2, 3, 4], "seed": [1, 2]})
    results = run_sweep(spec, tmp_path / "b", executor="batched")
    assert [r["outcome"] for r in results] == ["done"] * 6
    assert (
        max(widths) == 6 and min(widths) == 2
    )  # all at once; split by batch rows when they differ
    monkeypatch.setattr(trainer, "train_step", real)
    solo = sl.train(from_options({**TINY, "n_bases": 8, "k": 3, "seed": 2}), out=tmp_path / "solo")
    got = sl.Run.open(tmp_path / "b" / "k3-seed2").metric_rows()
    assert [r["loss"] for r in got] == pytest.approx(
        [r["loss"] for r in solo.metric_rows()], abs=1e-4
    )
    again = run_sweep(spec, tmp_path / "b", executor="batched")  # finished points are skipped
    assert {r["outcome"] for r in again} == {"skipped"}
    block(tmp_path / "c" / "seed2", {**TINY, "n_bases": 8, "k": 3, "seed": 2})
    bad = run_sweep(
        SweepSpec({**TINY, "n_bases": 8, "k": 3}, {"seed": [1, 2]}),
        tmp_path / "c",
        executor="batched",
    )
    assert [r["outcome"] for r in bad] == ["done", "failed"] and BLOCKED in bad[1]["error"]
