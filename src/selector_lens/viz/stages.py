"""The stages panel: the local learning coefficient beside the loss, and attribution patching's
component-by-checkpoint heatmap, under one checkpoint slider that marks the same step on both.

Both tables come from the store (`analysis.llc.llc`, `analysis.attribution.attribution_series`);
either may be missing, and the panel draws what there is.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots


def attribution_by_component(table):
    """Each head's estimate summed over positions (patching the head everywhere at once) per
    checkpoint: a wide frame, rows "L{layer}H{head}" in layer-major order, columns the steps."""
    per_head = table.groupby(["layer", "head", "step"]).estimate.sum().unstack("step")
    per_head.index = [f"L{layer}H{head}" for layer, head in per_head.index]
    return per_head


def _lines(step, tau, axes: list[tuple[str, str]]) -> list[dict]:
    """Vertical lines on each (x, y) axis pair: the slider's step (dotted) and τ (red). The
    slider replaces the figure's shapes, so both are drawn here."""
    out = []
    for x, line in ((step, dict(color="black", width=1, dash="dot")), (tau, dict(color="crimson"))):
        if x is not None:
            out += [
                dict(type="line", x0=x, x1=x, xref=xa, yref=f"{ya} domain", y0=0, y1=1, line=line)
                for xa, ya in axes
            ]
    return out


def stages_panel(metrics, loss: str, loss_label: str, llc=None, attribution=None, tau=None):
    """The loss (`metrics[loss]`) and the LLC (mean over chains, the chains' spread as a band,
    its own axis) against step; below, attribution patching's estimate for each head's output
    at each checkpoint. One slider over the checkpoints marks its step on both."""
    rows = 1 + (attribution is not None)
    specs = [[{"secondary_y": True}]] + [[{}]] * (rows - 1)
    titles = ["loss and the local learning coefficient"]
    if attribution is not None:
        titles.append("attribution patching: each head's output, clean into corrupted")
    fig = make_subplots(
        rows=rows, cols=1, shared_xaxes=True, specs=specs, subplot_titles=titles,
        vertical_spacing=0.12, row_heights=[0.5] * rows,
    )  # fmt: skip
    fig.add_scatter(x=metrics.step, y=metrics[loss], name=loss_label, mode="lines", row=1, col=1)
    steps = []
    if llc is not None:
        t = llc.sort_values("step")
        steps = list(t.step)
        band = dict(mode="lines", line=dict(width=0), showlegend=False, hoverinfo="skip")
        fig.add_scatter(x=t.step, y=t.llc + t.llc_std, **band, row=1, col=1, secondary_y=True)
        fig.add_scatter(
            x=t.step, y=t.llc - t.llc_std, fill="tonexty", fillcolor="rgba(214,39,40,0.2)",
            **band, row=1, col=1, secondary_y=True,
        )  # fmt: skip
        fig.add_scatter(
            x=t.step, y=t.llc, name="LLC (mean over chains; band: their spread)",
            mode="lines+markers", line=dict(color="rgb(214,39,40)"), row=1, col=1,
            secondary_y=True,
        )  # fmt: skip
        fig.update_yaxes(title_text="LLC", secondary_y=True, row=1, col=1)
    if attribution is not None:
        wide = attribution_by_component(attribution)
        steps = sorted(set(steps) | set(wide.columns))
        limit = float(abs(wide.values).max()) or 1.0
        fig.add_trace(
            go.Heatmap(
                z=wide.values, x=list(wide.columns), y=list(wide.index), colorscale="RdBu_r",
                zmid=0, zmin=-limit, zmax=limit, colorbar=dict(len=0.45, y=0.22),
                hovertemplate="step %{x}, %{y}: %{z:.3f}<extra></extra>", name="attribution",
            ),
            row=2, col=1,
        )  # fmt: skip
        fig.update_yaxes(autorange="reversed", title_text="head", row=2, col=1)
    fig.update_yaxes(title_text="nats", row=1, col=1, secondary_y=False)
    fig.update_xaxes(title_text="step", row=rows, col=1)
    axes = []
    for r in range(1, rows + 1):
        sub = fig.get_subplot(r, 1)  # "xaxis2" -> "x2": the names shapes refer to
        axes.append(tuple(a.plotly_name.replace("axis", "") for a in (sub.xaxis, sub.yaxis)))
    sliders = []
    if steps:
        sliders = [
            dict(
                active=len(steps) - 1,
                currentvalue=dict(prefix="checkpoint: step "),
                pad={"t": 60},
                steps=[
                    dict(method="relayout", args=[{"shapes": _lines(s, tau, axes)}], label=str(s))
                    for s in steps
                ],
            )
        ]
    fig.update_layout(
        title="Stages: the LLC beside the loss"
        + (f" (τ = {tau}, red line)" if tau is not None else ""),
        shapes=_lines(steps[-1] if steps else None, tau, axes),
        sliders=sliders,
        height=380 * rows,
    )
    return fig
