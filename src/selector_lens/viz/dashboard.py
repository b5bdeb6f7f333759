"""Self-contained HTML dashboards: plotly.js embedded once, no network request, opens from disk."""

from __future__ import annotations

import html
from pathlib import Path

from selector_lens.runs.transition import nominal_d
from selector_lens.viz import figures
from selector_lens.viz.explorer import attention_explorer
from selector_lens.viz.page import script_json, write_html
from selector_lens.viz.stages import stages_panel


def _summary_table(items) -> str:
    body = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(f'{v:.4g}' if isinstance(v, float) else str(v))}</td></tr>"
        for k, v in items
    )
    return f"<table>{body}</table>"


def draw_run(t, out, run_path) -> Path:
    """Draw a run's dashboard from its gathered tables (`analysis.tables.RunTables`): drawing only, no
    computation, so it takes seconds once the tables are stored."""
    blocks = [_summary_table(t.summary)]
    if t.still_training:
        blocks.append(f"<p class='note'>{html.escape(t.still_training)}</p>")
    blocks.append(figures.loss_curves(t.metrics, t.log_k, t.tau))
    if t.has_z:
        blocks.append(figures.dz_curve(t.metrics, t.tau))
        blocks.append(figures.attention_heatmap(t.attention, t.routing))
    if t.cascade is not None:
        blocks.append(figures.cascade_timeline(t.metrics, t.cascade))
    if t.has_candidates:
        blocks.append(figures.group_transition(t.metrics, t.k))
    if t.branches:
        blocks.append(figures.branch_overlay(t.metrics, t.branches, t.log_k))
    if t.ablation is not None and t.routing is not None:
        shown = {p: t.phases[p] for p in ("pre", "mid", "post")}
        blocks.append(figures.ablation_heatmaps(t.ablation, shown))
    if t.patching is not None:
        blocks.append(figures.patching_heatmap(t.patching, t.token_labels))
    if t.weights is not None:
        blocks.append(figures.weight_trajectory_curves(t.weights, t.tau))
    if t.lens is not None:
        blocks.append(figures.logit_lens_curves(t.lens, t.tau))
    if t.representations is not None:
        blocks.append(figures.representation_curves(t.representations, t.tau))
    if t.landscape is not None:
        blocks.append(figures.landscape_curves(t.landscape, t.tau))
    if t.llc is not None or t.attribution is not None:
        loss = ("candidate_loss", "candidate loss") if t.has_candidates else ("loss", "loss")
        blocks.append(stages_panel(t.metrics, *loss, t.llc, t.attribution, t.tau))
    if t.explorer is not None:
        blocks.append(
            attention_explorer(
                t.explorer, t.examples, t.example_tokens, t.z_positions, t.query_pos, t.tau
            )
        )
    if t.notes:
        blocks.append(
            "<p class='note'>Left out: " + "; ".join(html.escape(n) for n in t.notes) + "</p>"
        )
    info = {"run": str(run_path), "tau": t.tau, "routing_head": t.routing}
    blocks.append(f"<script type='application/json' id='run-info'>{script_json(info)}</script>")
    return write_html(out, f"selector-lens: {t.name}", blocks)


def sweep_dashboard(root, out) -> Path:
    """τ against D (log-log, fitted power law with its bootstrap band) and τ against K at fixed
    D, for every run under `root`, one fit per group of runs that share every option but K, D
    and the seed; runs that never transitioned are listed, not fitted."""
    from selector_lens.runs.run import run_table
    from selector_lens.runs.transition import fit_groups, power_law_fit

    table = run_table(root)
    blocks = []
    varying = fit_groups(table)["varying"]
    parts = table.groupby(varying, dropna=False) if varying else [((), table)]
    for values, part in parts:
        values = values if isinstance(values, tuple) else (values,)
        where = ", ".join(
            f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in zip(varying, values)
        )
        if where:  # runs that differ in more than K, D and seed: one fit each, never mixed
            blocks.append(f"<h2>{html.escape(where)}</h2>")
        done = part[part.tau.notna()]
        fit = None
        if done.D.nunique() >= 2:
            fit = power_law_fit(done.D, done.tau)
        else:
            blocks.append(
                "<p class='note'>No fit: fewer than two dataset sizes D with a transition.</p>"
            )
        blocks.append(figures.tau_vs_d(part, fit))
        if (done.groupby(done.D.map(nominal_d)).k.nunique() >= 2).any():
            blocks.append(figures.tau_vs_k(part))
    cols = [
        "run",
        "k",
        "n_bases",
        "D",
        "direction",
        "lr",
        "batch_size",
        "seed",
        "status",
        "tau",
        "plateau_over_log_k",
    ]
    shown = table[cols].astype(object).where(table[cols].notna(), "no transition")
    blocks.append("<h2>Runs</h2>" + shown.to_html(index=False, float_format=lambda v: f"{v:.3g}"))
    return write_html(out, f"selector-lens sweep: {Path(root).name}", blocks)


def run_dashboard(run, out, **options) -> Path:
    """The run's story on one page: `gather` (from the store), then draw (another task's:
    `task_dashboard`)."""
    from selector_lens.analysis.tables import gather

    if run.config.task.name != "selector":
        return task_dashboard(run, out, **options)
    return draw_run(gather(run, **options), out, run.path)


def task_dashboard(run, out, **options) -> Path:
    """Any task's page, read through the task protocol (`tables.gather_task`): its metrics,
    attention to each of its positions of interest, the corruption gap, head ablation at the
    phases (by its headline metric), patching of head outputs, and the attention explorer. A
    part the task cannot give (no positions of interest, no corrupted input) is named as left
    out."""
    from selector_lens.analysis.tables import gather_task

    t = gather_task(run, **options)
    task, tau = run.config.task, t["tau"]
    blocks = [_summary_table(t["summary"])]
    blocks.append(
        figures.metric_curves(t["metrics"], t["scalar"], tau, f"The {task.name} task's metrics")
    )
    if t.get("attention") is not None:
        for position, table in t["attention"].groupby("position", sort=False):
            blocks.append(
                figures.attention_heatmap(
                    table,
                    value="attention",
                    title=f"Attention at {position!r}: {task.positions.get(position, '')}",
                )
            )
    if t.get("gap") is not None:
        blocks.append(
            figures.metric_curves(
                t["gap"],
                {"gap": "corrupted minus clean", "clean_loss": "", "corrupt_loss": ""},
                tau,
                "The corruption gap: the focus loss on the corrupted input minus on the clean (nats)",
            )
        )
    if t.get("ablation") is not None:
        blocks.append(figures.ablation_heatmaps(t["ablation"], t["phases"], t["ranked_by"]))
    if t.get("patching") is not None:
        title = "head outputs, clean into the corrupted input, share of the focus loss recovered"
        blocks.append(figures.patching_heatmap(t["patching"], title=title))
    if t.get("llc") is not None or t.get("attribution") is not None:
        label = f"loss: {task.metrics.get('loss', 'the training loss')}"
        blocks.append(stages_panel(t["metrics"], "loss", label, t["llc"], t["attribution"], tau))
    if t.get("explorer") is not None:
        patterns, examples, tokens = t["explorer"]
        blocks.append(attention_explorer(patterns, examples, tokens, [], -1, tau))
    if t["notes"]:
        blocks.append(
            "<p class='note'>Left out: " + "; ".join(html.escape(n) for n in t["notes"]) + "</p>"
        )
    info = {"run": str(run.path), "task": task.name, "tau": tau}
    blocks.append(f"<script type='application/json' id='run-info'>{script_json(info)}</script>")
    return write_html(out, f"selector-lens: {run.path.name} ({task.name})", blocks)
