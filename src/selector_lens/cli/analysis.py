"""Commands that read a run's checkpoints: ablation, attention, lens, weights,
representations, the cascade, patching, the landscape, the store and the dashboard."""

from __future__ import annotations

from pathlib import Path

import typer

from selector_lens.cli import format as fmt
from selector_lens.cli.app import (
    EveryOpt,
    JsonOpt,
    PhaseOpt,
    RunOpt,
    StepOpt,
    _open_run,
    _run_guarded,
    _steps,
    app,
    spread,
)
from selector_lens.errors import SelectorLensError

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
    from selector_lens.analysis.ablation import ablate_each_head, ablate_heads, metric_names

    r = _open_run(run, "ablate-head", any_task=True)
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
    names = metric_names(r)
    records = [
        {
            "step": int(row.step),
            "phase": label.get(int(row.step)),
            "layer": int(row.layer),
            "head": int(row["head"]),
            "mode": mode,
            "keep_only": keep_only,
            "clean": {m: row[f"clean_{m}"] for m in names},
            "ablated": {m: row[f"ablated_{m}"] for m in names},
            "delta": {m: row[f"delta_{m}"] for m in names},
        }
        for _, row in table.iterrows()
    ]
    if json_out:
        fmt.json_line(records[0] if len(records) == 1 else records)
        return
    fmt.ablation_table(r, records, mode, keep_only, all_heads)


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
    """Attention mass onto z per layer and head across checkpoints (another task: onto each of
    its positions of interest)."""
    from selector_lens.analysis.attention import attention_to_positions, attention_to_z

    r = _open_run(run, "attention", any_task=True)
    steps = None if step is None and every is None else r.select_steps(step=step, every=every)
    if r.config.task.name != "selector":
        df = attention_to_positions(r, steps)
        if json_out:
            fmt.json_line(df.to_dict(orient="records"))
            return
        for name, part in df.groupby("position", sort=False):
            wide = part.pivot_table(index=["layer", "head"], columns="step", values="attention")
            cols = spread(list(wide.columns), 8)
            fmt.table(
                f"{r.path}: attention at {name!r} ({r.config.task.positions.get(name, '')}); "
                "rows: heads, columns: steps",
                ["head", *map(str, cols)],
                [[f"L{l}H{h}", *[float(wide.loc[(l, h), c]) for c in cols]] for l, h in wide.index],
            )
        return
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
    after the embedding and every block: P(correct a1), top-1, entropy, candidate loss on a1
    (another task: at its focus predictions, with their loss)."""
    from selector_lens.analysis.lens import logit_lens

    r = _open_run(run, "logit-lens", any_task=True)
    df = logit_lens(r, r.select_steps(step=step, phase=phase, every=every))
    if json_out:
        fmt.json_line(df.to_dict(orient="records"))
        return
    steps = sorted(df.step.unique())
    shown = steps if all_rows else spread(steps, 8)
    more = (
        "" if len(shown) == len(steps) else f"; {len(shown)} of {len(steps)} steps, --all for each"
    )
    selector = r.config.task.name == "selector"
    where = "the a1-predicting position" if selector else "the task's focus predictions"
    last = "candidate_loss" if selector else "loss"
    fmt.table(
        f"{r.path}: logit lens at {where} (layer 0 = embedding{more})",
        [
            "step",
            "layer",
            "P(correct)",
            "top-1",
            "entropy",
            "candidate loss" if selector else "loss",
        ],
        [
            [int(x.step), int(x.layer), x.p_correct, x.top1, x.entropy, getattr(x, last)]
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

    r = _open_run(run, "weights", any_task=True)
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
    """Patch clean activations into a z-corrupted run: which layer and position carry z
    (another task: into its own corrupted input, `corrupt`, read on its focus loss)."""
    from selector_lens.analysis.patching import patch_series

    r = _open_run(run, "patch", any_task=True)
    steps = [s for _, s in _steps(r, step, phase, every)]
    df = patch_series(r, site, steps, n_examples=examples)
    if json_out:
        fmt.json_line(df.to_dict(orient="records"))
        return
    if r.config.task.name != "selector":
        for s, part in df.groupby("step"):
            first = part.iloc[0]
            title = (
                f"step {s}: {site} patched from clean into the corrupted input; the recovered "
                f"share of the focus loss (corrupted {first.corrupt_loss:.3f} nats -> 0, clean "
                f"{first.clean_loss:.3f} -> 1)"
            )
            if site == "z":  # every position at once: one number per head
                fmt.table(
                    title + "; rows: layers, columns: heads",
                    ["", *(f"H{h}" for h in sorted(part["head"].unique()))],
                    [
                        [f"L{layer}", *(f"{v:.2f}" for v in rows.sort_values("head").value)]
                        for layer, rows in part.groupby("layer")
                    ],
                )
                continue
            wide = part.pivot_table(index="layer", columns="pos", values="value")
            fmt.table(
                title + "; columns: positions",
                ["", *map(str, wide.columns)],
                [[f"L{i}", *(f"{v:.2f}" for v in wide.loc[i])] for i in wide.index],
            )
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

    r = _open_run(run, "landscape", any_task=True)
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

    r = _open_run(run, "analyze", any_task=True)
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
            _open_run(run, "dashboard", any_task=True),
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


def ablate_head_main() -> None:
    """The `ablate-head` console script: the same command as `selector-lens ablate-head`."""
    _run_guarded(ablate_app)
