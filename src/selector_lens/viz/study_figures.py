"""The `reproduce` studies' own figures, each from its study's table (the rows the study saves
in its JSON), so a report rebuilt from published files draws the same figures."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots


def cascade_onsets(rows: list[dict]) -> go.Figure:
    """Claim 7, per transitioned seed: the routing head's attention onset, the Δz onset and τ."""
    done = [r for r in rows if r["tau"]]
    fig = go.Figure()
    names = [r["run"] for r in done]
    for key, label in (("attn_onset", "attention onset"), ("dz_onset", "Δz > 0.1"), ("tau", "τ")):
        fig.add_bar(x=names, y=[r[key] for r in done], name=label)
    fig.update_layout(
        title="The cascade per seed: routing-head attention onset, Δz onset, τ",
        yaxis_title="step",
        barmode="group",
    )
    return fig


def hessian_extremes(rows: list[dict], sample: int) -> go.Figure:
    """Claim 5: λmax and |λmin| at pre / mid / post, one pair of lines per run."""
    fig = go.Figure()
    for name in dict.fromkeys(r["run"] for r in rows):
        mine = [r for r in rows if r["run"] == name]
        steps = [r["step"] for r in mine]
        fig.add_scatter(
            x=steps, y=[r["lambda_max"] for r in mine], name=f"λmax {name}", mode="lines+markers"
        )
        fig.add_scatter(
            x=steps,
            y=[abs(r["lambda_min"]) for r in mine],
            name=f"|λmin| {name}",
            mode="lines+markers",
        )
    fig.update_layout(
        title=f"Hessian extremes at pre / mid / post (sample {sample})",
        xaxis_title="step",
        yaxis_title="eigenvalue",
        yaxis_type="log",
    )
    return fig


def hessian_vs_sample(sweep: list[dict], run: str) -> go.Figure:
    """Claim 5: λmax / |λmin| at one checkpoint against the subsample size."""
    fig = go.Figure()
    fig.add_scatter(
        x=[r["sample"] for r in sweep],
        y=[r["ratio"] for r in sweep],
        name="λmax / |λmin|",
        mode="lines+markers",
    )
    fig.update_layout(
        title=f"The ratio against the subsample size ({run}, mid)",
        xaxis_title="examples",
        yaxis_title="λmax / |λmin|",
        xaxis_type="log",
        yaxis_type="log",
    )
    return fig


def noise_taus(lr, batch) -> go.Figure:
    """Claim 4: τ against lr (batch fixed) and τ in examples and steps against batch (lr fixed),
    from `run_table` rows sorted by lr and by batch size."""
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=(
            "τ vs learning rate (batch fixed)",
            "τ in examples vs batch size (lr fixed)",
        ),
    )
    fig.add_scatter(x=lr.lr, y=lr.tau, mode="lines+markers", name="τ (steps)", row=1, col=1)
    fig.add_scatter(
        x=batch.batch_size,
        y=batch.tau_examples,
        mode="lines+markers",
        name="τ (examples)",
        row=1,
        col=2,
    )
    fig.add_scatter(
        x=batch.batch_size, y=batch.tau, mode="lines+markers", name="τ (steps)", row=1, col=2
    )
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return fig


def waiting_times(rows: list[dict], mean_ratio: float | None, solved_acc: float) -> go.Figure:
    """Claim 6: per seed, the steps each direction takes to reach `solved_acc` token accuracy."""
    fig = go.Figure()
    for direction in ("bz_to_a", "a_to_b"):
        fig.add_bar(
            x=[str(r["seed"]) for r in rows], y=[r[direction] for r in rows], name=direction
        )
    ratio = "-" if mean_ratio is None else f"{mean_ratio:.2f}"
    fig.update_layout(
        title=f"Waiting time (token accuracy >= {solved_acc}) by direction; reverse / forward = "
        f"{ratio} (paper 1.7-4.4)",
        xaxis_title="seed",
        yaxis_title="steps",
        barmode="group",
    )
    return fig
