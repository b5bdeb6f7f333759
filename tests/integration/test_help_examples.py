"""Every example in every command's `--help` runs, in the order the pages list them, in a fresh
folder: `train` makes the `checkpoints/k10` the later examples read, `sweep` the folders `fit`
reads, `reproduce` the root `publish` reads.

Sizes are the only thing changed (`shrunk`): the K = 10 paper run trains for an hour here, so the
same commands run on a run of seconds, with each step number divided by ten; `--scale cpu` and
`paper` become `tiny`. Two examples are not run, each for a reason `SKIPPED` names."""

import re
import shlex
from pathlib import Path

import pytest
import typer
import yaml

from tests.helpers import TINY, cli, paper_folder

REPO = Path(__file__).resolve().parents[2]
SPEC = "analyses/specs/scaling_cpu.yaml"
SKIPPED = {
    "selector-lens reproduce --scale paper -o paper.html": "trains the paper preset (hours); "
    "its --plan example runs, and the same command at --scale cpu and tiny",
    f"selector-lens sweep {SPEC} --executor ray": "needs the [ray] extra (make test-ray)",
}
# the K = 10 paper run's size, and one of seconds with checkpoints and training states to read
PAPER_RUN = "--k 10 --n-bases 1000 --seed 42"
SMALL_RUN = "--k 3 --n-bases 12 --seed 42 --eval-every 10 --ckpt-every 10 --state-every 50 "
SMALL_RUN += " ".join(f"--{k.replace('_', '-')} {TINY[k]}" for k in ("n_layers", "d_model"))
SMALL_RUN += " --d-head 16 --d-mlp 64 --batch-size 16"


def examples() -> list[str]:
    """Each `selector-lens ...` line of each command's epilog, its comment cut, in help order."""
    from selector_lens.cli import app

    lines = []
    for command in typer.main.get_command(app).commands.values():
        for line in (command.epilog or "").splitlines():
            if line.strip().startswith("selector-lens "):
                lines.append(line.split("#")[0].strip())
    return lines


def shrunk(example: str) -> str:
    """The example at the test's size: the paper run's options made small, step counts / 10,
    a grid sweep's points tiny, the cpu and paper scales (and their roots and result folders) tiny."""
    line = example.replace(PAPER_RUN, SMALL_RUN)
    if line.startswith("selector-lens sweep --grid"):  # the paper model, 6,000 steps a point
        line += "".join(f" --grid {k}={v}" for k, v in TINY.items())
    line = re.sub(r"(--steps?|--extend-to) (\d+)", lambda m: f"{m[1]} {int(m[2]) // 10}", line)
    line = re.sub(r"--scale (cpu|paper)(?! --plan)", "--scale tiny", line)
    line = line.replace("reproduce/paper", "reproduce/tiny")
    return line.replace("--out analyses/results/paper", "--out analyses/results/tiny")


def test_the_examples_are_the_ones_this_test_knows():
    """A new example is run by the test below; one that names a missing file fails here first."""
    found = examples()
    assert len(found) >= 38 and all(s in found for s in SKIPPED)
    assert all((REPO / p).exists() for e in found for p in re.findall(r"analyses/\S+", e))


def test_the_spec_example_is_the_cpu_scaling_study():
    """`analyses/specs/scaling_cpu.yaml` trains what `study scaling --scale cpu` trains for D."""
    from selector_lens.paper.presets import PRESETS

    spec = yaml.safe_load((REPO / SPEC).read_text())
    preset = PRESETS["scaling"]["cpu"]
    assert {**spec["base"], **spec["grid"]} == {**preset["base"], **preset["d"], "k": 5}


def test_every_help_example_runs_as_written(tmp_path, monkeypatch):
    opened = []
    monkeypatch.setattr("webbrowser.open", opened.append)
    (tmp_path / SPEC).parent.mkdir(parents=True)
    tiny_grid = {"base": {**TINY, "k": 3}, "grid": {"D": [24, 36]}}
    (tmp_path / SPEC).write_text(yaml.safe_dump(tiny_grid))  # the spec's runs at seconds' size
    paper_folder(tmp_path / "outputs" / "dense_k10")
    (tmp_path / "analyses" / "results").mkdir(exist_ok=True)
    (tmp_path / "analyses" / "results" / "paper").symlink_to(REPO / "analyses/results/paper")
    ran = []
    for example in examples():
        if example in SKIPPED:
            continue
        args = shlex.split(shrunk(example))[1:]
        out = cli(*args, cwd=tmp_path)
        assert out.returncode == 0, f"{example}\n{out.stdout[-2000:]}{out.stderr[-2000:]}"
        ran.append(args[0])
    assert opened and opened[0].endswith("k10.html")  # --open opened the page
    assert (tmp_path / "checkpoints/k10-frozen/run.json").is_file()
    assert (tmp_path / "analyses/results/tiny/report.json").is_file()
    assert len(ran) == len(examples()) - len(SKIPPED)


@pytest.fixture(autouse=True)
def _no_stray_files():
    """The examples run in tmp_path: nothing lands in the repository."""
    before = set(REPO.glob("*"))
    yield
    assert set(REPO.glob("*")) == before
