"""Commands that read stages across a run's checkpoints: attribution patching against exact
patching, and the local learning coefficient."""

from __future__ import annotations

import typer

from selector_lens.cli import format as fmt
from selector_lens.cli.app import EveryOpt, JsonOpt, PhaseOpt, RunOpt, StepOpt, _open_run, app


@app.command(
    epilog="Examples:\n\n  selector-lens attribute --run checkpoints/k10\n\n"
    "  selector-lens attribute --run checkpoints/k10 --every 4 --examples 100 --json"
)
def attribute(
    run: RunOpt = None,
    step: StepOpt = None,
    phase: PhaseOpt = None,
    every: EveryOpt = None,
    examples: int = typer.Option(200, help="Examples in the patching batch (seeded)."),
    json_out: JsonOpt = False,
):
    """Attribution patching: the linear estimate of patching every head's output, one forward and
    one backward per checkpoint, against exact patching of each head on the same examples."""
    from selector_lens.analysis.attribution import compare

    r = _open_run(run, "attribute", any_task=True)
    steps = r.select_steps(step=step, phase=phase, every=every)
    result = compare(r, steps, n_examples=examples)
    table = result.pop("table")
    if json_out:
        result["heads"] = table.drop(columns=["seconds"], errors="ignore").to_dict("records")
        fmt.json_line(result)
        return
    fmt.table(
        f"{r.path}: attribution patching (z) against exact patching, {len(steps)} checkpoints: "
        f"correlation {fmt.number(result['correlation'])} over {result['pairs']} pairs; "
        f"{result['seconds_attribution']:.1f} s against {result['seconds_exact']:.1f} s",
        ["step", "correlation", "largest |exact|", "largest |gap|"],
        [
            [x["step"], x["correlation"], x["largest_exact"], x["max_gap"]]
            for x in result["per_step"]
        ],
    )


@app.command(
    epilog="Examples:\n\n  selector-lens llc --run checkpoints/k10 --phase post --chains 2\n\n"
    "  selector-lens llc --run checkpoints/k10 --every 20 --chains 2 --draws 100 --json"
)
def llc(
    run: RunOpt = None,
    step: StepOpt = None,
    phase: PhaseOpt = None,
    every: EveryOpt = None,
    lr: float | None = typer.Option(
        None, help="SGLD step size (epsilon); default 0.1 / n beta (see docs/recipes/stages.md)."
    ),
    n_beta: float | None = typer.Option(None, help="Inverse temperature x n (default n / log n)."),
    localization: float = typer.Option(1.0, help="Pull back to the checkpoint (gamma)."),
    chains: int = typer.Option(4, help="SGLD chains (their spread is the estimate's)."),
    draws: int = typer.Option(1000, help="Draws per chain after the burn-in."),
    burn_in: int = typer.Option(200, help="Steps per chain before the draws."),
    batch_size: int = typer.Option(256, help="Examples per SGLD step."),
    json_out: JsonOpt = False,
):
    """The local learning coefficient per checkpoint: devinterp's SGLD on the task's own training
    loss, paired minibatches, the draws after the burn-in (the `slt` extra)."""
    from selector_lens.analysis.llc import LLCSettings
    from selector_lens.analysis.llc import llc as run_llc

    r = _open_run(run, "llc", any_task=True)
    settings = LLCSettings(lr, n_beta, localization, chains, draws, burn_in, batch_size)
    df = run_llc(r, r.select_steps(step=step, phase=phase, every=every), settings)
    if json_out:
        fmt.json_line(df.to_dict(orient="records"))
        return
    fmt.table(
        f"{r.path}: local learning coefficient ({chains} chains x {draws} draws, "
        f"lr {df.lr.iloc[0]:.3g}, "
        f"n beta {df.n_beta.iloc[0]:.4g}); τ {r.tau()}",
        ["step", "LLC", "± chains", "drift", "s", "check"],
        [
            [int(x.step), x.llc, x.llc_std, x.drift, x.seconds, x.flags or "ok"]
            for x in df.itertuples()
        ],
    )
