"""The `selector-lens` command line: thin shells over the Python API.

Only typer and the pure config dataclasses load at import, so `--help` is instant; torch and
TransformerLens load inside the command that needs them. Bad input: one line, exit code 2.
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from selector_lens.cli import format as fmt
from selector_lens.config import OPTIONS, RESUMABLE, from_options
from selector_lens.errors import SelectorLensError

app = typer.Typer(
    help="Watch a transformer go from the marginal P(A|B) to the conditional P(A|B,z).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _print_version(value: bool | None) -> None:
    if value:
        from selector_lens import __version__

        print(f"selector-lens {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool | None = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """Watch a transformer go from the marginal P(A|B) to the conditional P(A|B,z)."""


RUN_HELP = "Run directory (default: the latest run under checkpoints/)."
# Options several commands share, declared once.
RunOpt = Annotated[Path | None, typer.Option(help=RUN_HELP)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
StepOpt = Annotated[int | None, typer.Option(help="One checkpoint step.")]
PhaseOpt = Annotated[str | None, typer.Option(help="pre (τ/4) | mid (3τ/4) | post (1.5τ) | final.")]
EveryOpt = Annotated[int | None, typer.Option(help="Every n-th checkpoint.")]
ExecutorOpt = Annotated[str, typer.Option(help="local | ray | batched (see `sweep`).")]
WorkersOpt = Annotated[int | None, typer.Option(help="Parallel runs (default: one per core).")]
RootOpt = Annotated[
    Path | None, typer.Option(help="Where the runs go (default checkpoints/reproduce/<scale>).")
]


# what typer hands a command (typer.Context is a subclass it never instantiates; a runtime type
# check of the callback wants the class of the object itself)
ClickContext = typer.Context.__base__


def config_options(func):
    """Give a command one option per config field (`config.OPTIONS`: name, type, default and help
    come from the dataclasses), ahead of its own options; it receives them in `**options`."""
    kw = inspect.Parameter.KEYWORD_ONLY
    own = [
        p.replace(kind=kw)
        for p in inspect.signature(func, eval_str=True).parameters.values()
        if p.kind is not p.VAR_KEYWORD
    ]
    made = [
        inspect.Parameter(name, kw, annotation=o.type, default=typer.Option(o.default, help=o.help))
        for name, o in OPTIONS.items()
    ]
    func.__signature__ = inspect.Signature(made + own)
    func.__annotations__ = {p.name: p.annotation for p in made + own}
    return func


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
    analyze: bool = typer.Option(
        False, "--analyze", help="Once training ends, compute and store what the dashboard reads."
    ),
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
        from selector_lens.analysis.tables import analyze as run_analyze
        from selector_lens.runs.run import Run

        summary["analyze_s"] = run_analyze(Run.open(run.path, progress=not json_out))
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


# --- analyses over a run's checkpoints -------------------------------------------------------


def _open_run(run: Path | None, command: str):
    """The run (the latest one if None) for `command`, which reads the selector's positions and
    metrics (z, the candidates): a run of another task is one clear line."""
    from selector_lens.runs.run import Run

    r = Run.open(run, progress=True) if run is not None else Run.latest(progress=True)
    task = r.config.task
    if task.name != "selector":
        raise SelectorLensError(
            f"`{command}` reads the selector's positions and metrics (z, the candidates); "
            f"{r.path} is a run of the {task.name} task, which it does not read yet"
        )
    return r


def _steps(run, step, phase, every) -> list[tuple[str | None, int]]:
    """`Run.labelled_steps`, saying so when a run without τ falls back to its final step."""
    if step is None and phase is None and every is None and run.tau() is None:
        print(
            f"note: {run.path} never reaches candidate loss < 0.5 log K; reporting the final step only",
            file=sys.stderr,
        )
    return run.labelled_steps(step, phase, every)


def spread(items: list, n: int) -> list:
    """At most `n` of `items`, evenly spread from the first to the last."""
    if len(items) <= n:
        return list(items)
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)]


def _check_scale_and_executor(scale: str | None, executor: str) -> None:
    from selector_lens.paper.presets import SCALES
    from selector_lens.training.sweep import EXECUTORS

    if scale is not None and scale not in SCALES:
        raise SelectorLensError(f"unknown scale {scale!r}; choose one of {', '.join(SCALES)}")
    if executor not in EXECUTORS:
        raise SelectorLensError(
            f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}"
        )


def _claims(title: str, summary: dict) -> None:
    """A report's claims as a table: number, title, verdict."""
    fmt.table(
        title,
        ["#", "claim", "verdict"],
        [[c["number"], c["title"], c["verdict"]] for c in summary["claims"]],
    )


ABLATE_EPILOG = (
    "Examples:\n\n  ablate-head --layer 0 --head 3                       # pre, mid, post and final of the latest run\n\n"
    "  ablate-head --run checkpoints/k10 --layer 0 --head 1 --mode zero --step 2000 --json\n\n"
    "  ablate-head --run checkpoints/k10 --all-heads --phase post"
)


def ablate_head(
    layer: int | None = typer.Option(None, help="Layer of the head (0-indexed)."),
    head: int | None = typer.Option(None, help="Head index (0-indexed)."),
    all_heads: bool = typer.Option(False, "--all-heads", help="Ablate every head in turn."),
    keep_only: bool = typer.Option(False, help="Ablate every head except this one (sufficiency)."),
    run: RunOpt = None,
    mode: str = typer.Option(
        "mean", help="zero | mean (dataset mean) | resample (another example's output)."
    ),
    step: StepOpt = None,
    phase: PhaseOpt = None,
    every: EveryOpt = None,
    json_out: JsonOpt = False,
):
    """Ablate attention heads (through blocks.L.attn.hook_z) and compare with the clean run."""
    from selector_lens.analysis.ablation import METRICS, ablate_each_head, ablate_heads

    r = _open_run(run, "ablate-head")
    given = (layer is not None, head is not None)
    if (all_heads and any(given)) or (not all_heads and not all(given)):
        raise SelectorLensError("give --layer and --head, or --all-heads")
    labelled = _steps(r, step, phase, every)
    steps = [s for _, s in labelled]
    if all_heads:
        table = ablate_each_head(r, steps, mode, keep_only)
    else:
        table = ablate_heads(r, [(layer, head)], mode, steps, keep_only)
    label = {s: lab for lab, s in labelled}
    records = [
        {
            "step": int(row.step),
            "phase": label.get(int(row.step)),
            "layer": int(row.layer),
            "head": int(row["head"]),
            "mode": mode,
            "keep_only": keep_only,
            "clean": {m: row[f"clean_{m}"] for m in METRICS},
            "ablated": {m: row[f"ablated_{m}"] for m in METRICS},
            "delta": {m: row[f"delta_{m}"] for m in METRICS},
        }
        for _, row in table.iterrows()
    ]
    if json_out:
        fmt.json_line(records[0] if len(records) == 1 else records)
        return
    what = "kept alone" if keep_only else f"{mode}-ablated"
    tau, log_k = r.tau(), r.config.task.log_k
    # per step, the most damaging head first (kept alone: the best one first), marked
    records.sort(key=lambda x: (x["step"], -x["delta"]["candidate_loss"] * (1, -1)[keep_only]))
    top = {}
    for x in records:
        top.setdefault(x["step"], (x["layer"], x["head"]))

    def phase_of(x):
        frac = "" if not tau else f" ({x['step'] / tau:.2f} τ)"
        return f"{x['phase'] or ''}{frac}".strip() or None

    fmt.table(
        f"{r.path}: heads {what}; losses in nats; τ {tau if tau else 'none'}, log K {log_k:.3f}",
        ["step", "phase", "head", "cand. loss", "ablated", "Δ cand.", "Δ loss", "Δz clean", "Δ Δz"],
        [
            [
                x["step"],
                phase_of(x),
                f"L{x['layer']}H{x['head']}"
                + (" ◀ top" if all_heads and top[x["step"]] == (x["layer"], x["head"]) else ""),
                x["clean"]["candidate_loss"],
                x["ablated"]["candidate_loss"],
                x["delta"]["candidate_loss"],
                x["delta"]["loss"],
                x["clean"]["dz"],
                x["delta"]["dz"],
            ]
            for x in records
        ],
    )


app.command("ablate-head", epilog=ABLATE_EPILOG)(ablate_head)
ablate_app = typer.Typer(pretty_exceptions_enable=False, add_completion=False)
ablate_app.command(epilog=ABLATE_EPILOG)(ablate_head)


@app.command(
    epilog="Examples:\n\n  selector-lens attention --run checkpoints/k10\n\n"
    "  selector-lens attention --query target --every 4 --json"
)
def attention(
    run: RunOpt = None,
    query: str = typer.Option(
        "a1", help="a1 (the a1-predicting position; stored) | target (all target positions)."
    ),
    step: StepOpt = None,
    every: EveryOpt = None,
    json_out: JsonOpt = False,
):
    """Attention mass onto z per layer and head across checkpoints."""
    from selector_lens.analysis.attention import attention_to_z

    r = _open_run(run, "attention")
    steps = None if step is None and every is None else r.select_steps(step=step, every=every)
    df = attention_to_z(r, steps, query)
    if json_out:
        fmt.json_line(df.to_dict(orient="records"))
        return
    wide = df.pivot_table(index=["layer", "head"], columns="step", values="attn_to_z")
    cols = spread(list(wide.columns), 8)  # the terminal shows 8 steps; --json has them all
    fmt.table(
        f"{r.path}: attention to z from {query} (rows: heads, columns: steps)",
        ["head", *map(str, cols)],
        [[f"L{l}H{h}", *[float(wide.loc[(l, h), c]) for c in cols]] for l, h in wide.index],
    )


@app.command(
    "logit-lens",
    epilog="Examples:\n\n  selector-lens logit-lens --run checkpoints/k10 --every 4\n\n"
    "  selector-lens logit-lens --phase post --json",
)
def logit_lens_cmd(
    run: RunOpt = None,
    step: StepOpt = None,
    phase: PhaseOpt = None,
    every: EveryOpt = None,
    all_rows: bool = typer.Option(False, "--all", help="Every step in the table (default: 8)."),
    json_out: JsonOpt = False,
):
    """The residual stream at the a1-predicting position through ln_final and the unembedding,
    after the embedding and every block: P(correct a1), top-1, entropy, candidate loss on a1."""
    from selector_lens.analysis.lens import logit_lens

    r = _open_run(run, "logit-lens")
    df = logit_lens(r, r.select_steps(step=step, phase=phase, every=every))
    if json_out:
        fmt.json_line(df.to_dict(orient="records"))
        return
    steps = sorted(df.step.unique())
    shown = steps if all_rows else spread(steps, 8)
    more = (
        "" if len(shown) == len(steps) else f"; {len(shown)} of {len(steps)} steps, --all for each"
    )
    fmt.table(
        f"{r.path}: logit lens at the a1-predicting position (layer 0 = embedding{more})",
        ["step", "layer", "P(correct)", "top-1", "entropy", "candidate loss"],
        [
            [int(x.step), int(x.layer), x.p_correct, x.top1, x.entropy, x.candidate_loss]
            for x in df[df.step.isin(shown)].itertuples()
        ],
    )


@app.command(
    "weights",
    epilog="Examples:\n\n  selector-lens weights --run checkpoints/k10\n\n"
    "  selector-lens weights --json",
)
def weights_cmd(
    run: RunOpt = None,
    every: EveryOpt = None,
    json_out: JsonOpt = False,
):
    """Total weight norm, displacement between consecutive checkpoints and the cosine between
    consecutive displacements (per weight matrix in --json)."""
    from selector_lens.analysis.trajectory import weight_trajectory

    r = _open_run(run, "weights")
    df = weight_trajectory(r, r.select_steps(every=every))
    if json_out:  # undefined displacement / cosine (first checkpoints) as null
        fmt.json_line(df.astype(object).where(df.notna(), None).to_dict(orient="records"))
        return
    fmt.table(
        f"{r.path}: weight trajectory (τ = {r.tau()})",
        ["step", "total norm", "displacement", "cosine"],
        [[int(x.step), x.total_norm, x.displacement, x.cosine] for x in df.itertuples()],
    )


@app.command(
    "representations",
    epilog="Examples:\n\n  selector-lens representations --run checkpoints/k10 --every 4\n\n"
    "  selector-lens representations --phase post --json",
)
def representations_cmd(
    run: RunOpt = None,
    step: StepOpt = None,
    phase: PhaseOpt = None,
    every: EveryOpt = None,
    json_out: JsonOpt = False,
):
    """Within-base and between-base variance of the residual stream at the a1-predicting
    position, per layer (0 = the embedding), across checkpoints: the neural-collapse test."""
    from selector_lens.analysis.representations import representation_stats

    r = _open_run(run, "representations")
    df = representation_stats(r, r.select_steps(step=step, phase=phase, every=every))
    if json_out:
        fmt.json_line(df.astype(object).where(df.notna(), None).to_dict(orient="records"))
        return
    fmt.table(
        f"{r.path}: representations at the a1-predicting position (τ = {r.tau()})",
        ["step", "layer", "within", "between", "within / between"],
        [[int(x.step), int(x.layer), x.within, x.between, x.ratio] for x in df.itertuples()],
    )


@app.command(
    epilog="Examples:\n\n  selector-lens cascade --run checkpoints/k10\n\n  selector-lens cascade --json"
)
def cascade(
    run: RunOpt = None,
    dz_threshold: float = typer.Option(0.1, help="Δz onset: first eval with Δz above this (nats)."),
    mode: str = typer.Option("mean", help="Ablation mode used to find the routing head."),
    json_out: JsonOpt = False,
):
    """Find the routing head and time the cascade: its attention onset, Δz onset, τ."""
    from selector_lens.analysis.routing import cascade as run_cascade

    r = _open_run(run, "cascade")
    out = run_cascade(r, dz_threshold=dz_threshold, mode=mode)
    if json_out:
        fmt.json_line(out)
        return
    routing = out["routing"]
    fmt.table(
        f"{r.path}: internal cascade",
        ["quantity", "value"],
        [
            [
                "routing head",
                f"{out['routing_head']} (Δ cand. loss {routing['delta_candidate_loss']:+.2f} at step {routing['step']})",
            ],
            ["top attention-to-z head there", routing["top_attention_head"]],
            ["attention onset (step)", out["attn_onset"]],
            [f"Δz > {dz_threshold} onset (step)", out["dz_onset"]],
            ["τ (cand. loss < 0.5 log K)", out["tau"]],
            ["attention lead / τ", out["attn_lead_frac"]],
            ["Δz lead / τ", out["dz_lead_frac"]],
        ],
    )


@app.command(
    epilog="Examples:\n\n  selector-lens patch --run checkpoints/k10 --site resid_pre --step 2000\n\n"
    "  selector-lens patch --site z --every 5 --json"
)
def patch(
    run: RunOpt = None,
    site: str = typer.Option(
        "resid_pre", help="resid_pre | resid_mid | resid_post | attn_out | mlp_out | z."
    ),
    step: StepOpt = None,
    phase: PhaseOpt = None,
    every: EveryOpt = None,
    examples: int = typer.Option(200, help="Examples in the patching batch (seeded)."),
    json_out: JsonOpt = False,
):
    """Patch clean activations into a z-corrupted run: which layer and position carry z."""
    from selector_lens.analysis.patching import patch_series

    r = _open_run(run, "patch")
    steps = [s for _, s in _steps(r, step, phase, every)]
    df = patch_series(r, site, steps, n_examples=examples)
    if json_out:
        fmt.json_line(df.to_dict(orient="records"))
        return
    z0 = r.config.task.z_positions[0]  # earlier positions cannot see z (causal): always 0
    for s, part in df[df.pos >= z0].groupby("step"):
        keys = ["layer", "head"] if site == "z" else ["layer"]
        wide = part.pivot_table(index=keys, columns="pos", values="value")
        first = part.iloc[0]
        fmt.table(
            f"step {s}: {site}, normalised logit difference (clean {first.clean_logit_diff:.2f}, "
            f"corrupt {first.corrupt_logit_diff:.2f}); columns: positions from z on",
            ["", *map(str, wide.columns)],
            [
                [
                    f"L{i}" if site != "z" else "L{}H{}".format(*i),
                    *(f"{v:.2f}" for v in wide.loc[i]),
                ]
                for i in wide.index
            ],
        )


@app.command(
    epilog="Examples:\n\n  selector-lens landscape --run checkpoints/k10            # pre, mid, post and final\n\n"
    "  selector-lens landscape --run checkpoints/k10 --step 400 --sample 1024 --json"
)
def landscape(
    run: RunOpt = None,
    step: StepOpt = None,
    phase: PhaseOpt = None,
    every: EveryOpt = None,
    sample: int = typer.Option(
        512, help="Examples in the fixed, seeded subsample the loss is taken on."
    ),
    power_iters: int = typer.Option(30, help="Power-iteration steps for λmax."),
    lanczos_iters: int = typer.Option(30, help="Lanczos steps (λmin, top eigenvectors)."),
    top_k: int = typer.Option(5, help="Top eigen-directions for the gradient-noise share."),
    noise_batches: int = typer.Option(
        8, help="Minibatches (of the run's batch size) for the noise share."
    ),
    seed: int = typer.Option(0),
    estimator: str = typer.Option(
        "lanczos",
        help="lanczos (ours: λmin converged) | shifted-power (the paper code's: power iteration "
        "on H - σI with its stopping rule, which fires before it converges on the plateau).",
    ),
    json_out: JsonOpt = False,
):
    """Hessian λmax / λmin and the gradient-noise share along the top curvature directions."""
    from selector_lens.analysis.landscape import landscape as measure

    r = _open_run(run, "landscape")
    labelled = _steps(r, step, phase, every)
    paper = {} if estimator == "lanczos" else {"estimator": estimator}
    df = measure(
        r,
        [s for _, s in labelled],
        sample,
        seed,
        power_iters=power_iters,
        lanczos_iters=lanczos_iters,
        top_k=top_k,
        noise_batches=noise_batches,
        **paper,
    )
    label = {s: lab for lab, s in labelled}
    df.insert(1, "phase", [label.get(int(s)) for s in df.step])
    if json_out:
        fmt.json_line(df.to_dict(orient="records"))
        return
    if paper:
        fmt.table(
            f"{r.path}: loss landscape on {sample} examples, the paper code's estimator",
            ["step", "phase", "loss", "λmax", "λmin", "λmax/|λmin|", "products λmax", "λmin"],
            [
                [int(x.step), x.phase, x.loss, x.lambda_max, x.lambda_min, x.ratio]
                + [int(x.iters_max), int(x.iters_min)]
                for x in df.itertuples()
            ],
        )
        return
    fmt.table(
        f"{r.path}: loss landscape on {sample} examples",
        ["step", "phase", "loss", "λmax", "λmin", "λmax/|λmin|", f"noise on top {top_k}", "random"],
        [
            [
                int(x.step),
                x.phase,
                x.loss,
                x.lambda_max,
                x.lambda_min,
                x.ratio,
                x.noise_share_top,
                x.random_share,
            ]
            for x in df.itertuples()
        ],
    )


@app.command(
    epilog="Examples:\n\n  selector-lens analyze --run checkpoints/k10\n\n"
    "  selector-lens analyze --run checkpoints/k10 --recompute --json"
)
def analyze(
    run: RunOpt = None,
    recompute: bool = typer.Option(False, "--recompute", help="Compute again what is stored."),
    json_out: JsonOpt = False,
):
    """Compute and store (in the run's analyses/) what the dashboard and `cascade` read: the
    routing head, head ablations at pre / mid / post, patching, logit lens, attention explorer."""
    from selector_lens.analysis.tables import analyze as run_analyze

    r = _open_run(run, "analyze")
    seconds = run_analyze(r, recompute=recompute)
    if json_out:
        fmt.json_line({"run": str(r.path), "seconds": seconds})
        return
    fmt.table(
        f"{r.path}: stored analyses", ["table", "seconds"], [[k, v] for k, v in seconds.items()]
    )


@app.command(
    epilog="Examples:\n\n  selector-lens dashboard -o k10.html\n\n"
    "  selector-lens dashboard --run checkpoints/k10 -o k10.html --no-ablation --open"
)
def dashboard(
    run: RunOpt = None,
    sweep: Path | None = typer.Option(None, help="A folder of runs: τ vs D and τ vs K instead."),
    output: Path = typer.Option(
        Path("dashboard.html"), "-o", "--output", help="HTML file to write."
    ),
    ablation: bool = typer.Option(
        True, help="Ablate every head at pre/mid/post (the slowest part)."
    ),
    patch_steps: int = typer.Option(8, help="Checkpoints in the patching slider (0: no patching)."),
    example: int = typer.Option(
        0, help="Example the attention explorer opens on (and the patching axes' tokens)."
    ),
    explorer_examples: int = typer.Option(
        16, help="Examples the explorer's menu offers: --example, then others spread over the data."
    ),
    explorer_steps: int = typer.Option(12, help="Checkpoints in the attention explorer's slider."),
    open_browser: bool = typer.Option(False, "--open", help="Open the file in a browser."),
):
    """One self-contained HTML page telling a run's story (works offline, from disk)."""
    import time

    from selector_lens.viz.dashboard import run_dashboard, sweep_dashboard

    t = time.perf_counter()
    if sweep is not None:
        path = sweep_dashboard(sweep, output)
    else:
        path = run_dashboard(
            _open_run(run, "dashboard"),
            output,
            ablation=ablation,
            patch_steps=patch_steps,
            example=example,
            explorer_steps=explorer_steps,
            explorer_count=explorer_examples,
        )
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - t:.0f} s")
    if open_browser:
        import webbrowser

        webbrowser.open(path.resolve().as_uri())


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
    wall = time.perf_counter() - t
    failed = [r for r in results if r["outcome"] == "failed"]
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


def ablate_head_main() -> None:
    """The `ablate-head` console script: the same command as `selector-lens ablate-head`."""
    _run_guarded(ablate_app)


def main(args: list[str] | None = None) -> None:
    """Console-script entry (and the analyses/ scripts'): bad input becomes one line on stderr
    and exit code 2."""
    _run_guarded(app, args)


def _run_guarded(typer_app, args: list[str] | None = None) -> None:
    """Run the app with the command line's own errors in our shape too: an unknown command or
    option, or a value of the wrong type, is one line on stderr and exit code 2."""
    try:
        code = typer_app(args, standalone_mode=False)
    except SelectorLensError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except typer.TyperException as e:  # click's usage errors, as typer carries them
        ctx = getattr(e, "ctx", None)
        if type(e).__name__ == "NoArgsIsHelpError" and ctx is not None:
            print(ctx.get_help())  # a bare command shows its help, as click does
            sys.exit(2)
        where = f"{ctx.command_path}: " if ctx is not None else ""
        print(f"error: {where}{' '.join(e.format_message().split())}", file=sys.stderr)
        sys.exit(getattr(e, "exit_code", 2))
    except typer.Abort:
        print("aborted", file=sys.stderr)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
