"""The wheel: built from the source tree, installed in a fresh venv, it imports from there,
answers --help and trains (dependencies come from this venv: no download, no torch build)."""

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_wheel_installs_and_runs_in_a_fresh_venv(tmp_path):
    import shutil

    source = tmp_path / "source"  # a copy: building in place would leave build/ in the checkout
    skip = shutil.ignore_patterns(
        ".git", ".venv", "checkpoints", "build", "site", "*.egg-info", "__pycache__", "analyses"
    )
    shutil.copytree(ROOT, source, ignore=skip)
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(source),
        ],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = (tmp_path / "dist").glob("selector_lens-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "selector_lens/py.typed" in names and "selector_lens/paper/verdicts.py" in names
    assert any(n.endswith("entry_points.txt") for n in names)
    assert not any(n.startswith(("tests/", "analyses/", "checkpoints/")) for n in names)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.check_output(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            text=True,
        ).strip()
    )
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # torch and co.
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(site),
            str(wheel),
        ],
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr
    where = subprocess.check_output(
        [str(python), "-c", "import selector_lens; print(selector_lens.__file__)"],
        text=True,
        cwd=tmp_path,
    )
    assert where.startswith(str(site))  # the wheel's copy, not the source tree
    help_ = subprocess.run(
        [str(python), "-m", "selector_lens", "--help"], capture_output=True, text=True, cwd=tmp_path
    )
    assert help_.returncode == 0 and "branch" in help_.stdout and "reproduce" in help_.stdout
    quickstart = (
        "import selector_lens as sl\n"
        "cfg = sl.TrainConfig(task=sl.SelectorTask(k=3, n_bases=12), "
        "model=sl.ModelConfig(n_layers=1, n_heads=2, d_model=32, d_head=16, d_mlp=64), "
        "steps=40, batch_size=16, lr=3e-3, eval_every=10, ckpt_every=20)\n"
        "run = sl.train(cfg, out='r')\n"
        "print(run.metric_rows()[-1]['step'], run.status)\n"
    )
    out = subprocess.run(
        [str(python), "-c", quickstart],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] in ("finished", "early_stopped")
