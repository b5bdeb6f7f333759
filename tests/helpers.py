"""Builders the tests share: tiny configs, a run killed mid-training, the CLI in process, a
headless-browser render."""

import os
import subprocess
import sys
from dataclasses import dataclass

import pytest

import selector_lens as sl

CHROMIUM = "/usr/bin/chromium"
# flat options (a sweep point, `from_options`) of a run that trains in about a second
TINY = {
    "n_layers": 1,
    "n_heads": 2,
    "d_model": 32,
    "d_head": 16,
    "d_mlp": 64,
    "steps": 40,
    "batch_size": 16,
    "lr": 3e-3,
    "eval_every": 10,
    "ckpt_every": 20,
}


def tiny(**kw) -> sl.TrainConfig:
    """A config that trains in about a second: K=3, 12 bases, a 2-layer model."""
    task = sl.SelectorTask(**{"k": 3, "n_bases": 12, **kw.pop("task", {})})
    model = sl.ModelConfig(
        **{
            "n_layers": 2,
            "n_heads": 2,
            "d_model": 32,
            "d_head": 16,
            "d_mlp": 64,
            **kw.pop("model", {}),
        }
    )
    base = dict(steps=40, batch_size=16, lr=3e-3, eval_every=10, ckpt_every=20)
    return sl.TrainConfig(task=task, model=model, **{**base, **kw})


def train_until_killed(cfg, out, monkeypatch, evals: int):
    """Train `cfg` into `out` but die (KeyboardInterrupt) on the `evals`-th evaluation."""
    from selector_lens.training import trainer

    calls = {"n": 0}
    real = trainer.evaluate

    def dies(*a, **k):
        calls["n"] += 1
        if calls["n"] == evals:
            raise KeyboardInterrupt
        return real(*a, **k)

    with monkeypatch.context() as m:
        m.setattr(trainer, "evaluate", dies)
        with pytest.raises(KeyboardInterrupt):
            sl.train(cfg, out=out)


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def cli(*args, cwd=None) -> CliResult:
    """The `selector-lens` command run in process (typer's CliRunner), with `main()`'s contract:
    a SelectorLensError becomes `error: <message>` on stderr and exit code 2."""
    from typer.testing import CliRunner

    from selector_lens.cli import app

    here = os.getcwd()
    os.chdir(cwd or here)
    try:
        r = CliRunner().invoke(app, [str(a) for a in args])
    finally:
        os.chdir(here)
    if isinstance(r.exception, sl.SelectorLensError):
        return CliResult(2, r.stdout, f"error: {r.exception}\n")
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return CliResult(r.exit_code, r.stdout, r.stderr)


# command-line options of a run of a few seconds (`train` in a subprocess or in process)
SMALL_RUN = ["--k", "3", "--n-bases", "12", "--n-layers", "1", "--d-model", "32", "--d-head", "16"]
SMALL_RUN += ["--d-mlp", "64", "--batch-size", "16"]


def train_process(*args, stdout=subprocess.DEVNULL) -> subprocess.Popen:
    """`selector-lens train ARGS` in a fresh interpreter on one thread (bit-for-bit needs one
    thread count), stderr captured."""
    return subprocess.Popen(
        [sys.executable, "-m", "selector_lens", "train", *map(str, args)],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def logged(run) -> list[dict]:
    """A run's metrics rows without the wall clock: what must match for runs to be equal."""
    from selector_lens.runs.rundir import CLOCK

    return [{k: v for k, v in r.items() if k not in CLOCK} for r in run.metric_rows()]


def cli_process(*args, cwd=None) -> subprocess.CompletedProcess:
    """The real console script in a fresh interpreter: exit codes and import costs."""
    return subprocess.run(
        [sys.executable, "-m", "selector_lens", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
    )


def render(path):
    """Load `path` from file:// in headless Chromium: console errors, requests, figures, screenshot."""
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} missing: .ci/run installs the Debian package chromium")
        pytest.skip("chromium not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=args)
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        errors, requests = [], []
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("dialog", lambda d: (errors.append(f"dialog: {d.message}"), d.dismiss()))
        page.on("request", lambda req: requests.append(req.url))
        page.goto(path.resolve().as_uri())
        page.wait_for_function("document.querySelectorAll('div.fig').length > 0")
        page.wait_for_timeout(500)
        figs = page.locator("div.fig").count()
        rendered = page.evaluate(
            "Array.from(document.querySelectorAll('div.fig')).filter("
            "d => d.querySelector('svg.main-svg') && d.querySelector('.plot-container').offsetHeight > 100).length"
        )
        shot = page.screenshot(full_page=True)
        browser.close()
    return errors, requests, figs, rendered, shot


PAPER_CONFIG = {
    "experiment": {"seed": 1},
    "data": {"n_unique_b": 4, "k": 3, "split_by_base": True, "probe_fraction": 0.0},
    "model": {"n_layers": 1, "n_heads": 2, "d_model": 32, "d_head": 16, "d_mlp": 64},
    "training": {"batch_size": 8, "checkpoint_every": 10},
}


def paper_folder(path, config: dict | None = None, history=None, examples=None):
    """A synass-lens output folder of a tiny run (one checkpoint of a fresh model), its
    config.yaml's sections updated by `config`."""
    import torch
    import yaml

    from selector_lens.paper.importer import config_from_paper

    raw = {s: {**v, **(config or {}).get(s, {})} for s, v in PAPER_CONFIG.items()}
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(yaml.safe_dump(raw))
    good = config_from_paper(PAPER_CONFIG)
    step = path / "checkpoints" / "step_000010"
    step.mkdir(parents=True)
    torch.save(sl.build_model(good.model, good.task, 1).state_dict(), step / "model.pt")
    if history is not None:
        (path / "training_history.json").write_text(history)
    if examples is not None:
        (path / "examples.jsonl").write_text(examples)
    return path
