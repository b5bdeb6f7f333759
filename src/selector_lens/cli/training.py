"""Commands that train: `train`, `branch`, `sweep`, `fit`; and `prune`, which thins what a run
kept."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from selector_lens.cli import format as fmt
from selector_lens.cli.app import ClickContext, JsonOpt, RunOpt, _open_run, app, config_options
from selector_lens.config import RESUMABLE, from_options
from selector_lens.errors import SelectorLensError

AnalyzeOpt = Annotated[
    bool,
    typer.Option(
        "--analyze/--no-analyze",
        help="Once training ends, compute and store what `dashboard`, `find_routing_head` and "
        "`cascade` read, with the model's data still in memory (`selector-lens analyze`).",
    ),
]


def _analyze(path: Path, quiet: bool) -> dict[str, float]:
    """`tables.analyze` on a run just trained: the seconds each part took."""
    from selector_lens.analysis.tables import analyze
    from selector_lens.runs.run import Run

    return analyze(Run.open(path, progress=not quiet))


@app.command(
    epilog="Examples:\n\n  selector-lens train --k 10 --n-bases 1000 --seed 42 --steps 6000 --out checkpoints/k10\n\n"
    "  selector-lens train --out checkpoints/k10 --resume   # continue a killed run\n\n"
    "  selector-lens train --out checkpoints/k10 --resume --extend-to 12000   # train on past its budget"
)
@config_options
def train(
    ctx: ClickContext,
    out: Path | None = typer.Option(None, help="Run directory (default: checkpoints/<name>)."),
    resume: bool = typer.Option(
        False, help="Continue the run in --out from its last checkpoint, with run.json's options."
    ),
    extend_to: int | None = typer.Option(
        None,
        "--extend-to",
        help="With --resume: raise the run's step budget to N (a run that stopped early trains "
        "on: its early stop is turned off).",
    ),
    restart: bool = typer.Option(
        False, help="Train the run in --out again from step 0 (what it trained is removed)."
    ),
    analyze: AnalyzeOpt = True,
    log: str | None = typer.Option(
        None,
        "--log",
        help="tensorboard | wandb: mirror every evaluation there, written into the run "
        "directory (W&B offline: nothing is sent unless you run wandb sync).",
    ),
    json_out: JsonOpt = False,
    **options,
):
    """Train a HookedTransformer on the selector task with dense evaluation and checkpoints."""
    import time

    from selector_lens.training.trainer import train as run_training

    t0 = time.perf_counter()
    if extend_to is not None and not resume:
        raise SelectorLensError("--extend-to raises a resumed run's budget: pass --resume with it")
    given = [n for n in options if ctx.get_parameter_source(n).name == "COMMANDLINE"]
    cfg = from_options(_resumed_options(out, options, given, extend_to) if resume else options)
    try:
        run = run_training(
            cfg, out=out, resume=resume, progress=not json_out, restart=restart, log=log
        )
    except KeyboardInterrupt:
        where = out or Path("checkpoints") / cfg.name
        from selector_lens.runs.run import Run

        steps = Run(where).steps
        at = f"its state at step {steps[-1]} is saved" if steps else "nothing was saved"
        print(
            f"interrupted: {where}: {at}; continue it with "
            f"`selector-lens train --out {where} --resume`",
            file=sys.stderr,
        )
        raise typer.Exit(130) from None
    info = run.info
    summary = {
        "run": str(run.path),
        "status": info["status"],
        **info["summary"],
        "session_wall_s": time.perf_counter() - t0,
    }
    if analyze:
        summary["analyze_s"] = _analyze(run.path, json_out)
    if json_out:
        print(json.dumps(summary))
    else:
        fmt.train_summary(summary)
        print(
            f"next: selector-lens dashboard --run {run.path} -o {run.path / 'dashboard.html'}"
            + (
                ""
                if run.tau() is None
                else f"   or: selector-lens ablate-head --run {run.path} --all-heads --phase post"
            ),
            file=sys.stderr,
        )


@app.command(
    epilog="Examples:\n\n  selector-lens branch --from checkpoints/k10 --step 500 --out checkpoints/k10-lr2e-3 "
    "--set lr=2e-3\n\n"
    "  selector-lens branch --from checkpoints/k10 --step 500 --out checkpoints/k10-frozen "
    "--freeze-head L0H3\n\n"
    "  selector-lens branch --from checkpoints/k10 --step 500 --out checkpoints/k10-same   "
    "# no change: continues as the parent did\n\n"
    "  selector-lens branch --from checkpoints/k10 --step 500 --out checkpoints/k10-quiet "
    "--noise-scale 0   # only the gradient noise changes"
)
def branch(
    from_: Path = typer.Option(..., "--from", help="The parent run directory."),
    step: int = typer.Option(..., help="A step with a kept training state (train --state-every)."),
    out: Path = typer.Option(..., help="The branch's run directory (new)."),
    set_: list[str] | None = typer.Option(
        None, "--set", help="A training option to change, NAME=VALUE (repeatable): lr=2e-3."
    ),
    reset_adam: bool = typer.Option(False, help="Start the optimizer afresh (no moments)."),
    freeze_head: list[str] | None = typer.Option(
        None, help="A head that gets no update, L<layer>H<head> (repeatable)."
    ),
    reinit_head: list[str] | None = typer.Option(
        None, help="A head drawn again as at initialisation at the branch (repeatable)."
    ),
    ablate_head: list[str] | None = typer.Option(
        None, help="A head ablated in every training and evaluation forward (repeatable)."
    ),
    ablate_mode: str = typer.Option("mean", help="zero | mean (over the training set)."),
    z: str | None = typer.Option(
        None, help="permute (z drawn from its group's at every step) | drop (z is [PAD])."
    ),
    noise_scale: float | None = typer.Option(
        None,
        help="Scale the gradient's minibatch noise by C: g = ḡ + C (g_B - ḡ), ḡ from a reference "
        "batch of 16 x the batch; same lr, batch and examples. 0: (nearly) full batch; 1: the "
        "ordinary step, its noise recorded.",
    ),
    analyze: AnalyzeOpt = True,
    json_out: JsonOpt = False,
):
    """Train on from a kept state of a run with something changed: an intervention on the
    dynamics. The branch is a run of its own; run.json records its parent, step and changes."""
    from selector_lens.training.branch import branch as run_branch

    changes = {}
    for item in set_ or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise SelectorLensError(f"--set takes NAME=VALUE, got {item!r}")
        changes[name.strip().replace("-", "_")] = value.strip()
    child = run_branch(
        from_,
        step,
        out,
        changes,
        reset_adam=reset_adam,
        freeze_heads=freeze_head or [],
        reinit_heads=reinit_head or [],
        ablate_heads=ablate_head or [],
        ablate_mode=ablate_mode,
        z=z,
        noise_scale=noise_scale,
        progress=not json_out,
    )
    info = child.info
    summary = {"run": str(child.path), "status": info["status"], **info["summary"]}
    summary["branch"] = info["branch"]
    if analyze:
        summary["analyze_s"] = _analyze(child.path, json_out)
    if json_out:
        print(json.dumps(summary))
    else:
        fmt.train_summary(summary)


def _resumed_options(out: Path | None, options: dict, given: list[str], extend_to) -> dict:
    """A resumed run's options: its run.json's. An option given on this command line must say
    the same (or be one a resume may change, `config.RESUMABLE`); the budget rises only on
    purpose, with `--extend-to` (which also lifts an early stop that ended the run)."""
    from selector_lens.runs import rundir
    from selector_lens.runs.run import Run

    if out is None or not rundir.is_run(out):
        if extend_to is not None:
            raise SelectorLensError(f"--extend-to: {out} holds no run to extend")
        return options
    stored = Run.open(out).config.options()
    for name in given:
        if options[name] != stored[name] and (name not in RESUMABLE or name == "steps"):
            flag = "--" + name.replace("_", "-")
            hint = (
                "raise it with --extend-to N"
                if name == "steps"
                else "drop it, or choose another --out"
            )
            raise SelectorLensError(
                f"{flag} {options[name]} differs from the run's {stored[name]} (run.json): {hint}"
            )
    resumed = {**stored, **{n: options[n] for n in given}}
    if extend_to is not None:
        trained = Run(out).steps
        if extend_to <= (trained[-1] if trained else 0):
            raise SelectorLensError(
                f"--extend-to {extend_to}: the run has already trained to step {trained[-1]}"
            )
        resumed["steps"] = extend_to
        if Run(out).info.get("status") == rundir.EARLY_STOPPED and "early_stop" not in given:
            resumed["early_stop"] = False  # it would fire again at once
    return resumed


@app.command(
    epilog="Examples:\n\n  selector-lens sweep analyses/specs/scaling_cpu.yaml --workers 2\n\n"
    "  selector-lens sweep --grid k=5 --grid n_bases=100,200,400 --out checkpoints/sweeps/d\n\n"
    "  selector-lens sweep analyses/specs/scaling_cpu.yaml --executor ray   # pip install -e '.[ray]'"
)
def sweep(
    spec: Path | None = typer.Argument(
        None, help="YAML spec with `base:` and `grid:` (optional with --grid)."
    ),
    grid: list[str] = typer.Option(
        [], help="key=v1,v2,... (repeatable; overrides the spec's grid)."
    ),
    out: Path | None = typer.Option(
        None, help="Sweep directory (default: checkpoints/sweeps/<spec name>)."
    ),
    executor: str = typer.Option(
        "local",
        help="local (process pool) | ray | batched (runs of one shape as one batched model: for a GPU).",
    ),
    workers: int | None = typer.Option(
        None,
        help="Concurrent runs (default: one per core); batched: runs per batched model (default: all).",
    ),
    address: str | None = typer.Option(
        None, help="Ray cluster address (default: a local Ray instance)."
    ),
    parity: str | None = typer.Option(
        None, help="ours | paper for every point (the spec's base `parity`)."
    ),
    wait: bool = typer.Option(
        False, help="If another sweep runs in this directory, wait for it instead of stopping."
    ),
    analyze: AnalyzeOpt = True,
    json_out: JsonOpt = False,
):
    """Train every point of a grid, one run directory each; resumable, failures recorded (the
    command then exits 1, after every other point has run)."""
    import time

    from selector_lens.training.sweep import SweepSpec, run_sweep

    if spec is None and not grid:
        raise SelectorLensError("give a spec file or at least one --grid key=values")
    s = (SweepSpec.load(spec) if spec is not None else SweepSpec({}, {})).with_grid(grid)
    if parity is not None:
        s = SweepSpec({**s.base, "parity": parity}, s.grid)
    root = out or Path("checkpoints") / "sweeps" / (spec.stem if spec is not None else "grid")
    t = time.perf_counter()
    results = run_sweep(
        s,
        root,
        executor=executor,
        workers=workers,
        address=address,
        progress=not json_out,
        wait=wait,
    )
    failed = [r for r in results if r["outcome"] == "failed"]
    if analyze:  # each finished point, here (a point already analysed reads its store)
        for r in results:
            if r not in failed:
                r["analyze_s"] = _analyze(Path(r["run"]), True)
    wall = time.perf_counter() - t
    if json_out:
        fmt.json_line({"sweep": str(root), "wall_s": wall, "results": results})
    else:
        fmt.sweep_table(root, results, wall, executor)
    if failed:
        print(
            f"sweep {root}: {len(failed)} of {len(results)} points failed "
            f"({', '.join(Path(r['run']).name for r in failed)}); see their error.json",
            file=sys.stderr,
        )
        raise typer.Exit(1)


@app.command(
    epilog="Examples:\n\n  selector-lens fit checkpoints/sweeps/scaling_cpu\n\n  selector-lens fit checkpoints/sweeps/d --json"
)
def fit(
    sweep_dir: Path = typer.Argument(..., help="A folder of runs (a sweep)."),
    threshold: float = typer.Option(
        0.5, help="τ: first eval with candidate loss < threshold x log K."
    ),
    output: Path = typer.Option(
        Path("fit.json"), "-o", "--output", help="Where the fits go (never the folder read)."
    ),
    json_out: JsonOpt = False,
):
    """Fit the scaling laws over a sweep: τ vs D, τ vs K at fixed D, K beyond D; one fit per
    group of runs that share every option but K, D and the seed (lr, batch size, direction...)."""
    from selector_lens.files import atomic_write_text
    from selector_lens.runs.run import run_table
    from selector_lens.runs.transition import fit_groups

    table = run_table(sweep_dir, threshold)
    result = fit_groups(table)
    atomic_write_text(output, json.dumps(result, indent=1))
    if json_out:
        runs = table.astype(object).where(table.notna(), None).to_dict(orient="records")
        fmt.json_line({"runs": runs, **result})
        return
    fmt.fit_tables(sweep_dir, table, result)
    print(f"wrote {output}", file=sys.stderr)


@app.command(
    epilog="Examples:\n\n  selector-lens prune --run checkpoints/k10            # what would go\n\n"
    "  selector-lens prune --run checkpoints/k10 --thin-every 8 --yes"
)
def prune(
    run: RunOpt = None,
    window_start: float = typer.Option(0.25, help="Dense window start, in units of τ."),
    window_end: float = typer.Option(2.0, help="Dense window end, in units of τ."),
    thin_every: int = typer.Option(4, help="Outside the window keep every n-th checkpoint."),
    yes: bool = typer.Option(False, "--yes", help="Delete (without it: only show what would go)."),
    json_out: JsonOpt = False,
):
    """Thin a run's checkpoints, keeping every one in the dense window around τ."""
    r = _open_run(run, "prune")
    plan = r.prune((window_start, window_end), thin_every, dry_run=not yes)
    if json_out:
        fmt.json_line(plan)
        return
    verb = "deleted" if yes else "would delete (pass --yes)"
    print(
        f"τ = {plan['tau']}; dense window steps {plan['window_steps'][0]:.0f}..{plan['window_steps'][1]:.0f}; "
        f"keep {len(plan['keep'])}, {verb} {len(plan['drop'])} ({plan['freed_mb']:.0f} MB)"
    )
