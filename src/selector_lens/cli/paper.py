"""Commands of the paper's reproduction: `reproduce`, `study`, `import`, `publish`."""

from __future__ import annotations

from pathlib import Path

import typer

from selector_lens.cli import format as fmt
from selector_lens.cli.app import (
    ExecutorOpt,
    JsonOpt,
    RootOpt,
    WorkersOpt,
    _check_scale_and_executor,
    _claims,
    app,
)


@app.command(
    epilog="Examples:\n\n  selector-lens reproduce --scale cpu -o report.html\n\n"
    "  selector-lens reproduce --scale paper --plan      # every run, its budget, the wall time here\n\n"
    "  selector-lens reproduce --scale paper -o paper.html   # --plan prices it; resumes\n\n"
    "  selector-lens reproduce --from analyses/results/paper -o paper.html   # seconds, trains nothing"
)
def reproduce(
    scale: str | None = typer.Option(
        None,
        help="cpu (CPU-sized, 1/10 of the paper's D) | paper "
        "(the paper's settings; --plan measures and prices either where it runs) | tiny. Default cpu (with --from: "
        "the published one).",
    ),
    output: Path = typer.Option(
        Path("report.html"), "-o", "--output", help="The HTML report to write."
    ),
    root: RootOpt = None,
    executor: ExecutorOpt = "local",
    workers: WorkersOpt = None,
    plan: bool = typer.Option(
        False,
        "--plan",
        help="Train nothing: list every run with its budget and "
        "expected steps, and the wall time here from a step and an eval measured now.",
    ),
    from_: Path | None = typer.Option(
        None,
        "--from",
        help="Rebuild the report from a published folder "
        "(`selector-lens publish`): trains nothing, needs no checkpoint.",
    ),
    no_train: bool = typer.Option(
        False,
        "--no-train",
        help="Train nothing: report on the runs that have "
        "finished (their analyses are computed and stored with them).",
    ),
    only: str | None = typer.Option(
        None,
        help="Comma-separated studies to measure (marginal_first, scaling, "
        "collective, noise, geometry, asymmetry, cascade, parity); the rest are "
        "reported as not measured.",
    ),
    json_out: JsonOpt = False,
):
    """Run (or reuse) every study and write one report: each claim, the paper's number, ours, a verdict."""
    _check_scale_and_executor(scale, executor)
    if plan:
        from selector_lens.paper.plan import format_plan
        from selector_lens.paper.plan import plan as make_plan

        p = make_plan(scale or "cpu", workers)
        if json_out:
            fmt.json_line(p)
        else:
            print(format_plan(p))
        return
    from selector_lens.paper.studies import reproduce as run_all

    if from_ is not None:
        summary = run_all(scale, output=output, from_=from_, only=only.split(",") if only else None)
    else:
        summary = run_all(
            scale or "cpu",
            root,
            output,
            executor,
            workers,
            train=not no_train,
            only=only.split(",") if only else None,
        )
    if json_out:
        fmt.json_line(summary)
        return
    _claims(
        f"reproduce --scale {summary['scale']}: {summary['wall_s'] / 60:.1f} min; report {output}",
        summary,
    )


@app.command(
    epilog="Examples:\n\n  selector-lens study scaling --scale cpu --workers 2\n\n"
    "  python analyses/noise.py --scale paper    # the same command"
)
def study(
    name: str = typer.Argument(
        ...,
        help="marginal_first | scaling | collective | noise | geometry | asymmetry | cascade | "
        "sharing",
    ),
    scale: str = typer.Option("cpu", help="cpu | paper | tiny (see `reproduce`)."),
    root: RootOpt = None,
    executor: ExecutorOpt = "local",
    workers: WorkersOpt = None,
):
    """Run one study (what each analyses/ script runs): its runs into ROOT/runs/ (shared with
    `reproduce`), its JSON and HTML into ROOT/<study>/, its claims printed."""
    from selector_lens.paper.studies import run_study

    _check_scale_and_executor(scale, executor)
    run_study(name, scale, root, executor, workers)


@app.command(
    "import",
    epilog="Examples:\n\n  selector-lens import outputs/dense_k10 --out checkpoints/paper-k10\n\n"
    "  ablate-head --run checkpoints/paper-k10 --all-heads --step 3700",
)
def import_cmd(
    folder: Path = typer.Argument(
        ..., help="A synass-lens output folder (config.yaml, checkpoints/step_NNNNNN/model.pt)."
    ),
    out: Path = typer.Option(..., help="The run directory to create."),
    json_out: JsonOpt = False,
):
    """Import a run of the paper's own code: its weights, its dataset (parity "paper"), our metrics."""
    import time

    from selector_lens.paper.importer import import_run

    t = time.perf_counter()
    run = import_run(folder, out, progress=not json_out)
    summary = {
        "run": str(run.path),
        "steps": run.steps,
        **run.info["summary"],
        "import_s": time.perf_counter() - t,
    }
    if json_out:
        fmt.json_line(summary)
    else:
        fmt.train_summary({**summary, "status": "imported"})


@app.command(
    epilog="Examples:\n\n  selector-lens publish --root checkpoints/reproduce/paper --out analyses/results/paper"
)
def publish(
    root: Path = typer.Option(..., help="A study root (`reproduce --root`; holds runs/)."),
    out: Path = typer.Option(..., help="The published folder (kept under 25 MB; no checkpoints)."),
    scale: str | None = typer.Option(
        None, help="The root's scale (default: from its report.json, else paper)."
    ),
    json_out: JsonOpt = False,
):
    """Copy the finished runs' logs and stored analyses, then rebuild the report from them alone."""
    from selector_lens.paper.publish import publish as run_publish

    summary = run_publish(root, out, scale)
    if json_out:
        fmt.json_line(summary)
        return
    print(
        f"published {len(summary['published'])} runs ({len(summary['still_running'])} still running) into {out}: "
        f"{summary['size_mb']:.1f} MB"
    )
    _claims(f"report {out / 'report.html'}", summary)
