"""Self-contained HTML dashboards: plotly.js embedded once, no network request, opens from disk."""

from __future__ import annotations

import html
import json
from pathlib import Path

from ..errors import SelectorLensError
from . import figures


def write_html(path, title: str, blocks: list) -> Path:
    """Write `blocks` (HTML strings or plotly Figures) as one offline page."""
    from plotly.offline import get_plotlyjs

    parts = []
    for block in blocks:
        if isinstance(block, str):
            parts.append(block)
        else:
            parts.append(
                '<div class="fig">'
                + block.to_html(full_html=False, include_plotlyjs=False)
                + "</div>"
            )
    page = (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<script type='text/javascript'>{get_plotlyjs()}</script>"
        "<style>body{font-family:sans-serif;margin:1.5em;max-width:1300px}"
        "table{border-collapse:collapse}td,th{padding:2px 10px;border-bottom:1px solid #ddd;text-align:right}"
        ".note{background:#fff3cd;padding:.6em}.fig{margin:1em 0}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>{''.join(parts)}</body></html>"
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


def _summary_table(run, tau) -> str:
    cfg, rows = run.config, run.metric_rows()
    last = rows[-1]
    t = cfg.task
    items = [
        (
            "task",
            f"{t.direction}, K={t.k}, n_bases={t.n_bases} (D={t.n_examples}), seed {cfg.seed}",
        ),
        (
            "training",
            f"lr {cfg.lr:g}, batch {cfg.batch_size}, {cfg.steps} steps max; status {run.status}",
        ),
        ("last eval step", last["step"]),
        ("τ (candidate loss < 0.5 log K)", tau if tau is not None else "no transition (yet)"),
        ("final candidate accuracy", last.get("candidate_acc")),
        ("final Δz (nats)", last.get("dz")),
    ]
    body = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(f'{v:.4g}' if isinstance(v, float) else str(v))}</td></tr>"
        for k, v in items
    )
    return f"<table>{body}</table>"


def run_dashboard(
    run,
    out,
    ablation: bool = True,
    patch_steps: int = 8,
    example: int = 0,
    explorer_steps: int = 12,
    mode: str = "mean",
    lens_steps: int = 8,
) -> Path:
    """The run's story on one page; parts that need what the run lacks (a transition, z,
    candidates) are left out with a line saying why."""
    from ..attention import attention_patterns, attention_to_z
    from ..interventions.ablation import ablate_each_head
    from ..interventions.patching import patch_series
    from ..routing import most_necessary_head
    from ..task import decode

    rows = run.metric_rows()
    if not rows:
        raise SelectorLensError(f"{run.path} has no metrics yet: nothing to show")
    task = run.config.task
    if not 0 <= example < task.n_examples:
        raise SelectorLensError(
            f"example {example} out of range: the run has examples 0..{task.n_examples - 1}"
        )
    metrics = run.metrics
    tau = run.tau()
    blocks = [_summary_table(run, tau)]
    if run.status == "running":
        blocks.append(
            f"<p class='note'>This run is still training (or was killed): showing the "
            f"{len(rows)} evaluations and {len(run.steps)} checkpoints written so far.</p>"
        )
    notes = []
    blocks.append(figures.loss_curves(metrics, task.log_k, tau))
    routing = None
    phases = run.phases() if tau is not None and run.steps else None
    if ablation and phases and task.has_z:
        try:  # a published run serves its stored tables, and has nothing to compute them from
            table = ablate_each_head(
                run, sorted(set(phases[p] for p in ("pre", "mid", "post"))), mode
            )
            post = table[table.step == phases["post"]]
            routing = "L{}H{}".format(*most_necessary_head(post)[0])
            abl_fig = figures.ablation_heatmaps(
                table, {p: phases[p] for p in ("pre", "mid", "post")}
            )
        except SelectorLensError as e:
            if run.has_weights:
                raise
            notes.append(f"head ablation: not stored with this published run ({e})")
    elif ablation:
        notes.append("head ablation: needs a run with z that has transitioned (phases come from τ)")
    if task.has_z:
        blocks.append(figures.dz_curve(metrics, tau))
        blocks.append(figures.attention_heatmap(attention_to_z(run), routing))
    if task.has_candidates:
        blocks.append(figures.group_transition(metrics, task.k))
    if routing is not None:
        blocks.append(abl_fig)
    if not run.has_weights:
        notes.append(
            "activation patching, the attention explorer, the logit lens and the weight trajectory: "
            "need the weights, which a published run leaves out"
        )
    elif task.direction == "bz_to_a" and task.k > 1 and run.steps and patch_steps > 0:
        labels = decode(run.task_data.tokens[0].tolist())
        blocks.append(
            figures.patching_heatmap(
                patch_series(run, "resid_pre", figures.thin(run.steps, patch_steps)), labels
            )
        )
    else:
        notes.append("activation patching: needs a bz_to_a run with K >= 2 and checkpoints")
    if run.steps and run.has_weights:
        from ..logit_lens import logit_lens
        from ..weight_trajectory import weight_trajectory

        blocks.append(figures.weight_trajectory_curves(weight_trajectory(run), tau))
        if task.has_candidates:
            blocks.append(
                figures.logit_lens_curves(logit_lens(run, figures.thin(run.steps, lens_steps)), tau)
            )
        tokens = run.task_data.tokens[example : example + 1]
        patterns = {
            s: attention_patterns(m, tokens).numpy()
            for s, m in run.series(figures.thin(run.steps, explorer_steps))
        }
        blocks.append(f"<h2>Attention explorer: example {example}</h2>")
        blocks.append(figures.attention_explorer(patterns, decode(tokens[0].tolist())))
    if notes:
        blocks.append(
            "<p class='note'>Left out: " + "; ".join(html.escape(n) for n in notes) + "</p>"
        )
    blocks.append(
        f"<script type='application/json' id='run-info'>{json.dumps({'run': str(run.path), 'tau': tau, 'routing_head': routing})}</script>"
    )
    return write_html(out, f"selector-lens: {run.path.name}", blocks)


def sweep_dashboard(root, out) -> Path:
    """τ against D (log-log, fitted power law with its bootstrap band) and τ against K at fixed
    D, for every run under `root`; runs that never transitioned are listed, not fitted."""
    from ..runs import run_table
    from ..transition import power_law_fit

    table = run_table(root)
    done = table[table.tau.notna()]
    blocks = []
    fit = None
    if done.D.nunique() >= 2:
        fit = power_law_fit(done.D, done.tau)
    else:
        blocks.append(
            "<p class='note'>No fit: fewer than two dataset sizes D with a transition.</p>"
        )
    blocks.append(figures.tau_vs_d(table, fit))
    if (done.groupby("D").k.nunique() >= 2).any():
        blocks.append(figures.tau_vs_k(table))
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
