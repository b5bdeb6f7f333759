"""Training another task end to end: modular addition from the CLI and from Python, resumed
exactly; an instrument that reads the selector's positions says so in one line."""

from pathlib import Path

import pytest

import selector_lens as sl
from selector_lens.task.modular import ModularTask
from tests.helpers import cli, logged, train_until_killed

MODULAR = ["--task", "modular", "--p", "11", "--train-frac", "0.5", "--n-layers", "1",
           "--d-model", "32", "--d-head", "16", "--d-mlp", "64", "--normalization-type", "none",
           "--act-fn", "relu", "--weight-decay", "1.0", "--batch-size", "61", "--lr", "3e-3"]  # fmt: skip


def tiny_modular(**kw) -> sl.TrainConfig:
    """Modular addition mod 7 on half the pairs, a 1-layer model of seconds."""
    model = sl.ModelConfig(n_layers=1, d_model=16, d_head=8, d_mlp=32, n_heads=2)
    base = dict(steps=40, batch_size=24, eval_every=10, ckpt_every=10, early_stop=False)
    return sl.TrainConfig(task=ModularTask(p=7, train_frac=0.5), model=model, **{**base, **kw})


def test_modular_trains_from_the_cli_and_memorises_first(tmp_path):
    r = cli("train", *MODULAR, "--steps", "300", "--eval-every", "50", "--out", tmp_path / "m",
            "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    run = sl.Run.open(tmp_path / "m")
    assert isinstance(run.config.task, ModularTask) and run.config.task.p == 11
    assert run.info["config"]["task"]["name"] == "modular"
    rows = run.metric_rows()
    assert set(ModularTask.metrics) <= set(rows[-1])
    assert rows[0]["train_acc"] < 0.3 and rows[-1]["train_acc"] == 1.0  # memorised
    assert rows[-1]["test_acc"] < rows[-1]["train_acc"]
    # an instrument that reads the selector's positions (the cascade of z's groups): one line
    bad = cli("cascade", "--run", tmp_path / "m", "--json")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "the modular task" in bad.stderr


def test_a_killed_modular_run_resumes_exactly(tmp_path, monkeypatch):
    cfg = tiny_modular()
    train_until_killed(cfg, tmp_path / "k", monkeypatch, evals=3)
    resumed = sl.train(cfg, out=tmp_path / "k", resume=True)
    straight = sl.train(cfg, out=tmp_path / "s")
    assert logged(resumed) == logged(straight)
    assert resumed.tau() == straight.tau()  # the task's transition (None or a step)


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_task.py"


def test_the_example_task_trains_from_its_file_and_reopens_anywhere(tmp_path):
    r = cli("train", "--task", f"{EXAMPLE}:WindowSum", "--n-layers", "1", "--d-model", "32",
            "--d-head", "16", "--d-mlp", "64", "--steps", "60", "--eval-every", "20",
            "--lr", "3e-3", "--out", tmp_path / "w", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    run = sl.Run.open(tmp_path / "w")  # run.json names the file by its full path
    assert run.info["config"]["task"]["name"] == f"{EXAMPLE}:WindowSum"
    assert type(run.config.task).__name__ == "WindowSum" and run.config.task.seed == 42
    rows = run.metric_rows()
    assert [r["step"] for r in rows] == [0, 20, 40, 60]
    assert set(rows[-1]) >= {"loss", "token_acc"}  # the toolkit's evaluation: it has none
    assert rows[-1]["loss"] < rows[0]["loss"]
    page = cli("dashboard", "--run", tmp_path / "w", "-o", tmp_path / "w.html")
    assert page.returncode == 0 and "Attention at 'window'" in (tmp_path / "w.html").read_text()
    bad = cli("representations", "--run", tmp_path / "w", "--json")  # the selector's groups
    assert bad.returncode == 2 and "windowsum task" in bad.stderr


def test_a_branch_keeps_its_parents_task(tmp_path):
    cfg = tiny_modular(state_every=10)
    parent = sl.train(cfg, out=tmp_path / "p")
    same = sl.branch(parent, 20, tmp_path / "same")
    assert same.config.task == parent.config.task
    assert logged(same) == logged(parent)  # no change: the parent's steps, bit for bit
    quiet = sl.branch(parent, 20, tmp_path / "quiet", noise_scale=0.0)
    assert isinstance(quiet.config.task, ModularTask)
    assert quiet.metric_rows()[-1]["noise_scale"] == 0.0


SWEEPS = {  # one tiny grid per task: an option of its own where it has flat ones
    "modular": ("{task: modular, train_frac: 0.5, n_layers: 1}", "{p: [5, 7]}", "p", [5, 7]),
    "induction": (
        "{task: induction, vocab: 8, length: 12, segment: 3, n_sequences: 64, attn_only: true}",
        "{segment: [2, 3]}",
        "segment",
        [2, 3],
    ),
    "windowsum": (f"{{task: '{EXAMPLE}:WindowSum'}}", "{seed: [1, 2]}", "seed", [1, 2]),
}
TINY_MODEL = (
    "d_model: 16, d_head: 8, d_mlp: 32, n_heads: 2, steps: 20, batch_size: 24, "
    "eval_every: 10, early_stop: false"
)


def sweep_spec(tmp_path, task: str) -> Path:
    base, grid, _, _ = SWEEPS[task]
    spec = tmp_path / "grid.yaml"
    spec.write_text(f"base: {{{base[1:-1]}, {TINY_MODEL}}}\ngrid: {grid}\n")
    return spec


@pytest.mark.parametrize("task", list(SWEEPS))
def test_a_sweep_over_another_tasks_options(tmp_path, task):
    r = cli("sweep", sweep_spec(tmp_path, task), "--out", tmp_path / "s", "--workers", "1",
            "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    from selector_lens.runs.run import run_table

    table = run_table(tmp_path / "s")
    _, _, option, values = SWEEPS[task]
    assert sorted(table[option]) == values and len(set(table.task)) == 1
    if task == "modular":
        assert sorted(table.D) == [round(0.5 * 25), round(0.5 * 49)]


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.parametrize("task", list(SWEEPS))
def test_a_sweep_of_another_task_on_ray_is_the_local_one(tmp_path, task):
    pytest.importorskip("ray")
    from selector_lens.training.sweep import SweepSpec, run_sweep

    spec = SweepSpec.load(sweep_spec(tmp_path, task))
    ray = run_sweep(spec, tmp_path / "ray", executor="ray", workers=2)
    local = run_sweep(spec, tmp_path / "local", workers=2)  # as the Ray one: one thread each
    for a, b in zip(ray, local):
        rows_a = sl.Run.open(a["run"]).metric_rows()
        rows_b = sl.Run.open(b["run"]).metric_rows()
        assert [x["loss"] for x in rows_a] == [x["loss"] for x in rows_b]
