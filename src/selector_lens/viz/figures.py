"""One plotly Figure per analysis table. Each function takes the tidy DataFrame an analysis
returns (or the run's metrics) and reshapes nothing silently: what is plotted is the table.

Only what would not be visible is thinned: heatmaps over steps keep at most `max_steps`
evenly spaced columns (the first and last always kept).
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from selector_lens.runs.steps import thin
from selector_lens.runs.transition import group_crossing_steps, nominal_d

DZ_FLOOR = 1e-4  # Δz is drawn on a log axis: values below this (or negative) sit at the floor


def loss_curves(metrics, log_k: float, tau: int | None = None) -> go.Figure:
    """Loss, first-target loss and candidate loss against step, with log K, log 36 and τ."""
    fig = go.Figure()
    for col, name in (
        ("loss", "loss (A tokens + EOS)"),
        ("first_target_loss", "first-target loss"),
        ("candidate_loss", "candidate loss"),
    ):
        if col in metrics and metrics[col].notna().any():
            fig.add_scatter(x=metrics.step, y=metrics[col], name=name, mode="lines")
    if log_k > 0:
        fig.add_hline(y=log_k, line_dash="dash", line_color="gray", annotation_text="log K")
    fig.add_hline(
        y=math.log(36), line_dash="dot", line_color="gray", annotation_text="log 36 (unigram)"
    )
    if tau is not None:
        fig.add_vline(x=tau, line_color="crimson", annotation_text=f"τ = {tau}")
    fig.update_layout(title="Losses (nats)", xaxis_title="step", yaxis_title="nats")
    return fig


def dz_curve(metrics, tau: int | None = None) -> go.Figure:
    """The z-deranged gap Δz on a log axis (values below 1e-4 drawn at 1e-4)."""
    fig = go.Figure()
    fig.add_scatter(
        x=metrics.step, y=np.maximum(metrics.dz.astype(float), DZ_FLOOR), name="Δz", mode="lines"
    )
    if tau is not None:
        fig.add_vline(x=tau, line_color="crimson", annotation_text=f"τ = {tau}")
    fig.update_layout(
        title=f"z-deranged gap Δz (nats, log scale; floor {DZ_FLOOR:g})",
        xaxis_title="step",
        yaxis_type="log",
        yaxis_title="Δz",
    )
    return fig


def logit_lens_curves(lens, tau: int | None = None) -> go.Figure:
    """P(correct a1) per layer against step (table from `logit_lens`; layer 0 = the embedding)."""
    fig = go.Figure()
    for layer, part in lens.groupby("layer"):
        name = "embedding" if layer == 0 else f"after block {layer - 1}"
        fig.add_scatter(x=part.step, y=part.p_correct, name=name, mode="lines+markers")
    if tau is not None:
        fig.add_vline(x=tau, line_color="crimson", annotation_text=f"τ = {tau}")
    fig.update_layout(
        title="Logit lens at the a1-predicting position: P(correct a1) by layer",
        xaxis_title="step",
        yaxis_title="P(correct a1)",
        yaxis_range=[0, 1],
    )
    return fig


def representation_curves(stats, tau: int | None = None) -> go.Figure:
    """Within-base and between-base variance of the residual stream at the a1-predicting
    position, per layer, against step (table from `representation_stats`). The embedding's
    variances are 0 there (every example has the same token at that position), so the log axis
    leaves it out."""
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=("within-base variance", "between-base variance")
    )
    import plotly.colors

    palette = plotly.colors.qualitative.Plotly
    for layer, part in stats.groupby("layer"):
        name = "embedding" if layer == 0 else f"after block {layer - 1}"
        colour = palette[int(layer) % len(palette)]  # one colour per layer in both panels
        for col, key in enumerate(("within", "between"), start=1):
            fig.add_scatter(
                x=part.step,
                y=part[key],
                name=name,
                mode="lines",
                line_color=colour,
                legendgroup=name,
                showlegend=col == 1,
                row=1,
                col=col,
            )
    for col in (1, 2):
        if tau is not None:
            fig.add_vline(x=tau, line_color="crimson", row=1, col=col)
    fig.update_yaxes(type="log", title_text="variance")
    fig.update_xaxes(title_text="step")
    fig.update_layout(
        title=f"Representations at the a1-predicting position (τ = {tau})",
        legend_title_text="layer (both panels)",
    )
    return fig


def weight_trajectory_curves(traj, tau: int | None = None) -> go.Figure:
    """Total weight norm, displacement between checkpoints and the cosine of consecutive
    displacements against step (table from `weight_trajectory`)."""
    fig = make_subplots(
        rows=1,
        cols=3,
        subplot_titles=(
            "total weight norm",
            "displacement from the previous checkpoint",
            "cosine of consecutive displacements",
        ),
    )
    units = ("L2 norm", "L2 distance", "cosine")
    for col, key in enumerate(("total_norm", "displacement", "cosine"), start=1):
        fig.add_scatter(x=traj.step, y=traj[key], mode="lines", name=key, row=1, col=col)
        if tau is not None:
            fig.add_vline(x=tau, line_color="crimson", row=1, col=col)
        fig.update_yaxes(title_text=units[col - 1], row=1, col=col)
    fig.update_xaxes(title_text="step")
    fig.update_layout(title=f"Weight trajectory (τ = {tau}, red line)", showlegend=False)
    return fig


def head_labels(n_layers: int, n_heads: int) -> list[str]:
    return [f"L{l}H{h}" for l in range(n_layers) for h in range(n_heads)]


def metric_curves(metrics, names: dict[str, str], tau: int | None, title: str) -> go.Figure:
    """Each of a task's metrics named in `names` ({column: its description}) against step, with
    the transition step."""
    fig = go.Figure()
    for col, text in names.items():
        if col in metrics and metrics[col].notna().any():
            fig.add_scatter(x=metrics.step, y=metrics[col], name=col, mode="lines", hovertext=text)
    if tau is not None:
        fig.add_vline(x=tau, line_color="crimson", annotation_text=f"transition {tau}")
    fig.update_layout(title=title, xaxis_title="step")
    return fig


def attention_heatmap(
    attn,
    routing_head: str | None = None,
    max_steps: int = 400,
    value: str = "attn_to_z",
    title: str = "Attention from the a1-predicting position onto z",
) -> go.Figure:
    """Attention as a head x step heatmap (the selector's: `attention_to_z`, onto z; any task's:
    `attention_to_positions`, one position of interest); a named head boxed."""
    steps = thin(attn.step.unique(), max_steps)
    table = attn[attn.step.isin(steps)]
    wide = table.pivot_table(index=["layer", "head"], columns="step", values=value)
    labels = [f"L{l}H{h}" for l, h in wide.index]
    fig = go.Figure(
        go.Heatmap(
            z=wide.values,
            x=list(wide.columns),
            y=labels,
            colorscale="Viridis",
            zmin=0,
            zmax=1,
            colorbar_title="mass on z" if value == "attn_to_z" else "attention",
            hovertemplate="%{y} step %{x}: %{z:.3f}<extra></extra>",
        )
    )
    boxed = ""
    if routing_head in labels:  # boxed, and named in the title (a label beside the box would
        i = labels.index(routing_head)  # sit on the colorbar's title)
        fig.add_shape(
            type="rect",
            xref="paper",
            x0=0,
            x1=1,
            y0=i - 0.5,
            y1=i + 0.5,
            line=dict(color="red", width=2),
        )
        boxed = f" (red box: {routing_head})"
    fig.update_layout(
        yaxis_title="head",
        title=title + boxed,
        xaxis_title="step",
        yaxis=dict(autorange="reversed"),
    )
    return fig


def group_transition(metrics, k: int, max_steps: int = 400) -> go.Figure:
    """Per-group candidate accuracy, groups sorted by the step they cross 50%: a vertical front
    means the groups switch together; a diagonal, one by one."""
    rows = metrics[metrics.group_correct.notna()]
    steps = thin(rows.step.tolist(), max_steps)
    rows = rows[rows.step.isin(steps)]
    acc = np.array(rows.group_correct.tolist(), dtype=float) / k  # [steps, groups]
    crossing = group_crossing_steps(rows.step.tolist(), acc)
    order = np.argsort(crossing, kind="stable")
    fig = go.Figure(
        go.Heatmap(
            z=acc[:, order].T,
            x=rows.step.tolist(),
            y=list(range(len(order))),
            colorscale="Blues",
            zmin=0,
            zmax=1,
            colorbar_title="accuracy",
            hovertemplate="group rank %{y}, step %{x}: %{z:.2f}<extra></extra>",
        )
    )
    fig.update_layout(
        title="Per-group candidate accuracy (groups sorted by the step they pass 50%)",
        xaxis_title="step",
        yaxis_title="group (sorted)",
    )
    return fig


def ablation_heatmaps(
    table, phases: dict[str, int], metric: str = "delta_candidate_loss"
) -> go.Figure:
    """Layer x head heatmaps of an ablation effect (table from `ablate_each_head`), one per phase."""
    names = [n for n, s in phases.items() if s in set(table.step)]
    fig = make_subplots(
        rows=1,
        cols=len(names),
        subplot_titles=[f"{n} (step {phases[n]})" for n in names],
        shared_yaxes=True,
    )
    vmax = float(np.nanmax(np.abs(table[metric].astype(float)))) or 1.0
    for j, name in enumerate(names):
        part = table[table.step == phases[name]]
        wide = part.pivot_table(index="layer", columns="head", values=metric)
        fig.add_trace(
            go.Heatmap(
                z=wide.values,
                x=[f"H{h}" for h in wide.columns],
                y=[f"L{l}" for l in wide.index],
                colorscale="RdBu_r",
                zmid=0,
                zmin=-vmax,
                zmax=vmax,
                showscale=j == len(names) - 1,
                colorbar_title="Δ nats",
                hovertemplate="%{y}%{x}: %{z:+.3f}<extra></extra>",
                name=name,
            ),
            1,
            j + 1,
        )
    fig.update_yaxes(autorange="reversed", title_text="layer")
    fig.update_xaxes(title_text="head")
    fig.update_layout(title=f"Head ablation: {metric.replace('_', ' ')} (nats)")
    return fig


def _slider(n_frames: int, per_frame: int, labels, prefix: str) -> list[dict]:
    """A slider showing one frame (a block of `per_frame` traces) at a time."""
    steps = []
    for i, label in enumerate(labels):
        visible = [False] * (n_frames * per_frame)
        visible[i * per_frame : (i + 1) * per_frame] = [True] * per_frame
        steps.append(dict(method="update", args=[{"visible": visible}], label=str(label)))
    return [dict(active=n_frames - 1, steps=steps, currentvalue=dict(prefix=prefix), pad={"t": 70})]


def patching_heatmap(
    table,
    token_labels: list[str] | None = None,
    title: str = "clean into z-corrupted, normalised logit difference",
) -> go.Figure:
    """Layer x position heatmap of a patching table (from `patch_series`; layer x head where the
    table patched heads at every position at once), a slider over steps."""
    steps = sorted(table.step.unique())
    by_head = "head" in table and (table.pos == -1).all()
    fig = go.Figure()
    for i, step in enumerate(steps):
        part = table[table.step == step]
        wide = part.pivot_table(index="layer", columns="head" if by_head else "pos", values="value")
        x = [
            f"H{p}" if by_head else f"{p}:{token_labels[p]}" if token_labels else str(p)
            for p in wide.columns
        ]  # unique categories
        fig.add_trace(
            go.Heatmap(
                z=wide.values,
                x=x,
                y=[f"L{l}" for l in wide.index],
                visible=i == len(steps) - 1,
                colorscale="RdBu_r",
                zmid=0,
                zmin=-1,
                zmax=1,
                name=f"step {step}",
                hovertemplate="%{y} %{x}: %{z:.3f}<extra></extra>",
            )
        )
    site = table.site.iloc[0] if len(table) else ""
    fig.update_layout(
        title=f"Activation patching ({site}): {title}",
        xaxis_title="head (every position at once)" if by_head else "position",
        yaxis=dict(autorange="reversed", title="layer"),
        sliders=_slider(len(steps), 1, steps, "step "),
    )
    return fig


def landscape_curves(table, tau: int | None = None) -> go.Figure:
    """The stored loss landscape (`analysis.landscape`) at its checkpoints: λmax and |λmin| on a
    log axis (a negative λmin is a saddle), and the gradient noise's share along the top
    curvature directions against the share a random subspace of that size would get."""
    fig = make_subplots(
        cols=2,
        subplot_titles=("Hessian extremes", "gradient noise along the top directions"),
        horizontal_spacing=0.12,
    )
    t = table.sort_values("step")
    fig.add_scatter(x=t.step, y=t.lambda_max, name="λmax", mode="lines+markers", row=1, col=1)
    fig.add_scatter(
        x=t.step,
        y=t.lambda_min.abs(),
        name="|λmin| (λmin < 0: a saddle)",
        mode="lines+markers",
        row=1,
        col=1,
    )
    if "noise_share_top" in t:
        fig.add_scatter(
            x=t.step,
            y=t.noise_share_top,
            name="noise share on the top directions",
            mode="lines+markers",
            row=1,
            col=2,
        )
        fig.add_scatter(
            x=t.step,
            y=t.random_share,
            name="a random subspace's share",
            mode="lines+markers",
            line_dash="dot",
            row=1,
            col=2,
        )
    if tau is not None:
        for col in (1, 2):
            fig.add_vline(x=tau, line_color="crimson", annotation_text=f"τ = {tau}", row=1, col=col)
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="eigenvalue (abs, log)", type="log", row=1, col=1)
    fig.update_yaxes(title_text="share of the noise's variance", type="log", row=1, col=2)
    sample = int(t["sample"].iloc[0]) if "sample" in t else None
    fig.update_layout(title=f"Loss landscape at the stored checkpoints ({sample} examples)")
    return fig


def cascade_timeline(metrics, c: dict) -> go.Figure:
    """The cascade (`routing.cascade`): the routing head's attention to z and Δz against step,
    with their onsets and τ marked, so the lead of each over the drop reads off the axis."""
    from plotly.subplots import make_subplots

    layer, head = (int(x) for x in c["routing_head"][1:].split("H"))
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_scatter(
        x=metrics.step,
        y=[a[layer][head] for a in metrics.attn_to_z],
        name=f"attention to z, {c['routing_head']}",
        secondary_y=False,
    )
    fig.add_scatter(x=metrics.step, y=metrics.dz, name="Δz (nats)", secondary_y=True)
    marks = (("attention onset", c["attn_onset"], "green"), ("Δz onset", c["dz_onset"], "orange"))
    for label, step, colour in (*marks, ("τ", c["tau"], "crimson")):
        if step is not None:
            fig.add_vline(x=step, line_dash="dash", line_color=colour)
            fig.add_annotation(
                x=step, y=1.02, yref="paper", text=label, showarrow=False, font_color=colour
            )
    lead = c["dz_lead_frac"]
    fig.update_layout(
        title=f"The cascade: {c['routing_head']}'s attention and Δz before the drop (Δz leads τ "
        f"by {'-' if lead is None else f'{lead:.2f}'} τ)",
        xaxis_title="step",
        margin_t=90,
    )
    fig.update_yaxes(title_text="attention to z", secondary_y=False)
    fig.update_yaxes(title_text="Δz (nats)", secondary_y=True)
    return fig


def branch_overlay(parent, branches: list[dict], log_k: float) -> go.Figure:
    """A run's branches over it, each from its branch step: candidate loss (against log K), Δz,
    and the attention to z of each head a branch changed (dashed: the parent's). `parent`: the
    run's metrics; `branches`: `analysis.tables` branch curves."""
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=1,
        cols=3,
        subplot_titles=("candidate loss", "Δz (nats)", "attention to z of changed heads"),
    )
    fig.add_scatter(
        x=parent.step, y=parent.candidate_loss, name="parent", line_color="black", row=1, col=1
    )
    fig.add_scatter(
        x=parent.step,
        y=parent.dz,
        name="parent Δz",
        line_color="black",
        showlegend=False,
        row=1,
        col=2,
    )
    fig.add_hline(y=log_k, line_dash="dot", line_color="grey", row=1, col=1)
    shown = set()
    for b in branches:
        steps = [r["step"] for r in b["rows"]]
        name = f"{b['name']} (step {b['step']}: {b['label']})"
        fig.add_scatter(
            x=steps, y=[r.get("candidate_loss") for r in b["rows"]], name=name, row=1, col=1
        )
        fig.add_scatter(
            x=steps, y=[r.get("dz") for r in b["rows"]], name=name, showlegend=False, row=1, col=2
        )
        for label in b["heads"]:
            layer, head = (int(x) for x in label[1:].split("H"))
            attn = [r["attn_to_z"][layer][head] if r.get("attn_to_z") else None for r in b["rows"]]
            fig.add_scatter(x=steps, y=attn, name=f"{label}: {b['name']}", row=1, col=3)
            if label not in shown and "attn_to_z" in parent:
                shown.add(label)
                fig.add_scatter(
                    x=parent.step,
                    y=[a[layer][head] for a in parent.attn_to_z],
                    name=f"{label}: parent",
                    line_dash="dash",
                    line_color="black",
                    row=1,
                    col=3,
                )
    for col in (1, 2, 3):
        fig.update_xaxes(title_text="step", row=1, col=col)
    fig.update_yaxes(title_text="nats", row=1, col=1)
    fig.update_yaxes(title_text="nats", row=1, col=2)
    fig.update_yaxes(title_text="attention", row=1, col=3)
    fig.update_layout(title="Branches of this run, from their branch steps")
    return fig


def tau_vs_d(table, fit: dict | None = None, reference: dict | None = None) -> go.Figure:
    """τ against D on log-log axes (table from `run_table`), with the power-law fit and its band.
    `reference`: another source's points to draw beside ours, {"name", "D", "tau"}."""
    done = table[table.tau.notna()]
    fig = go.Figure()
    if reference is not None:
        fig.add_scatter(
            x=reference["D"],
            y=reference["tau"],
            mode="markers",
            marker={"symbol": "square-open", "size": 9, "color": "black"},
            name=reference["name"],
            hovertemplate="D=%{x}, τ=%{y}<extra>" + reference["name"] + "</extra>",
        )
    for k, part in done.groupby("k"):
        fig.add_scatter(
            x=part.D,
            y=part.tau,
            mode="markers",
            name=f"K={k}",
            hovertemplate="D=%{x}, τ=%{y}<extra>" + f"K={k}</extra>",
        )
    title = "Waiting time τ against dataset size D"
    if fit is not None:
        grid = np.geomspace(done.D.min(), done.D.max(), 50)
        if len(fit["draws"]):
            preds = np.exp(fit["draws"][:, 1:2] + fit["draws"][:, 0:1] * np.log(grid))
            lo, hi = np.quantile(preds, [(1 - fit["ci"]) / 2, (1 + fit["ci"]) / 2], axis=0)
            fig.add_scatter(
                x=np.r_[grid, grid[::-1]],
                y=np.r_[hi, lo[::-1]],
                fill="toself",
                mode="none",
                fillcolor="rgba(200,30,30,0.15)",
                name=f"{fit['ci']:.0%} band",
                hoverinfo="skip",
            )
        fig.add_scatter(
            x=grid,
            y=fit["C"] * grid ** fit["alpha"],
            mode="lines",
            line_color="crimson",
            name=f"τ = {fit['C']:.3g} D^{fit['alpha']:.2f}",
        )
        lo_a, hi_a = fit["alpha_ci"]
        title += f": α = {fit['alpha']:.2f} [{lo_a:.2f}, {hi_a:.2f}], R² = {fit['r2']:.3f} (paper: 1.19 [1.14, 1.31])"
    fig.update_layout(
        title=title,
        xaxis_type="log",
        yaxis_type="log",
        xaxis_title="D = n_bases × K",
        yaxis_title="τ (steps)",
    )
    return fig


def tau_vs_k(table) -> go.Figure:
    """τ against K at each fixed D that has at least two K (the paper: flat)."""
    done = table[table.tau.notna()]
    fig = go.Figure()
    for d, part in done.groupby(done.D.map(nominal_d)):
        if part.k.nunique() >= 2:
            part = part.sort_values("k")
            fig.add_scatter(x=part.k, y=part.tau, mode="lines+markers", name=f"D={d}")
    fig.update_layout(title="τ against K at fixed D", xaxis_title="K", yaxis_title="τ (steps)")
    return fig
