"""The `reproduce` studies' own figures, each from its study's table (the rows the study saves
in its JSON), so a report rebuilt from published files draws the same figures."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.colors import qualitative
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


def hessian_by_lanczos_step(row: dict) -> go.Figure:
    """Claim 5: λmax and |λmin| after each Lanczos step at one checkpoint: flat ends mean enough
    steps; a |λmin| still growing means the phases' λmin (and so their ratio) is not converged."""
    steps = list(range(1, len(row["lambda_min_by_step"]) + 1))
    fig = go.Figure()
    fig.add_scatter(x=steps, y=row["lambda_max_by_step"], name="λmax", mode="lines")
    fig.add_scatter(
        x=steps, y=[abs(v) for v in row["lambda_min_by_step"]], name="|λmin|", mode="lines"
    )
    fig.update_layout(
        title=f"Lanczos's extremes by step ({row['run']}, {row['phase']}, step {row['step']}, "
        f"{row['sample']} examples)",
        xaxis_title="Lanczos steps (Hessian-vector products)",
        yaxis_title="eigenvalue",
        yaxis_type="log",
    )
    return fig


def estimators(rows: list[dict]) -> go.Figure:
    """Claim 5: the paper code's λmin (shifted power iteration) after each Hessian-vector
    product, against Lanczos's λmin after each step, on the same checkpoint and examples (rows
    from the geometry study's `estimators`). Where the shifted estimate stops near 0 and
    Lanczos goes on down, the paper's ratio is its stopping rule's."""
    fig = go.Figure()
    for r in rows:
        name = f"{r['run']} {r['phase']} (step {r['step']})"
        by_iter = r["shifted_lambda_min_by_iter"]
        fig.add_scatter(
            x=list(range(1, len(by_iter) + 1)),
            y=by_iter,
            mode="lines+markers",
            name=f"{name}: paper's shifted power (stopped at {r['shifted_iters']})",
        )
        by_step = r["lanczos_lambda_min_by_step"]
        fig.add_scatter(
            x=list(range(1, len(by_step) + 1)),
            y=by_step,
            mode="lines",
            line_dash="dash",
            name=f"{name}: Lanczos",
        )
    fig.update_layout(
        title="λmin by estimator: the paper's shifted power iteration against Lanczos",
        xaxis_title="Hessian-vector products (Lanczos: steps)",
        yaxis_title="λmin estimate",
    )
    return fig


def branch_times(rows: list[dict], part: str, tau: int) -> go.Figure:
    """A branching study's summary (`studies.interventions.summary`): per kind of branch, the
    mean τ shift (necessity) or steps left to τ (noise, against η / B) over seeds, the range as
    error bars; kinds where no seed escaped are marked at 0 with their count. Noise: beside each
    kind, τ of the same change made from step 0 where a run has it (`from_step_0`)."""
    value = "shift" if part == "necessity" else "remaining"
    fig = go.Figure()
    groups = sorted({r.get("step") for r in rows}, key=lambda s: (s is None, s))
    for step in groups:
        here = [r for r in rows if r.get("step") == step]
        if part == "noise":
            here = sorted(here, key=lambda r: r["noise_scale"])
        y = [r[value] if r[value] is not None else 0 for r in here]
        lo = [r[value] - r[f"{value}_range"][0] if r[value] is not None else 0 for r in here]
        hi = [r[f"{value}_range"][1] - r[value] if r[value] is not None else 0 for r in here]
        fig.add_scatter(
            x=[r["change"] for r in here],
            y=y,
            error_y={"type": "data", "array": hi, "arrayminus": lo},
            mode="markers",
            name=f"from step {step}" if step is not None else value,
            text=[f"{r['escaped']}/{r['seeds']} escaped" for r in here],
            hovertemplate="%{x}: %{y} (%{text})<extra></extra>",
        )
    start = [r for r in rows if r.get("from_step_0") and r["from_step_0"]["tau"] is not None]
    if part == "noise" and start:
        fig.add_scatter(
            x=[r["change"] for r in start],
            y=[r["from_step_0"]["tau"] for r in start],
            mode="markers",
            marker_symbol="diamond-open",
            name="τ of the same change from step 0 (claim 4's run)",
            text=[r["from_step_0"]["run"] for r in start],
            hovertemplate="%{x}: τ %{y} (%{text})<extra></extra>",
        )
    title = (
        f"Branches: τ shift from the parent's ({tau})"
        if part == "necessity"
        else "Branches from mid-plateau: steps left to τ, by noise η / B (ascending)"
    )
    fig.update_layout(
        title=title,
        xaxis_title="branch",
        yaxis_title="steps (0 where no seed escaped)",
    )
    return fig


def noise_taus(lr, batch, windows: list[dict] | None = None) -> go.Figure:
    """Claim 4: τ against lr (batch fixed) and against batch (lr fixed), by each definition the
    rows carry (`run_table` rows sorted by lr and by batch size; `tau_first_target` where the
    study adds the paper's batch τ). `windows`: the paper's lr window width per lr over seeds
    ({lr, window, window_at_least}); a censored lr is drawn as an open triangle, a lower bound."""
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("τ vs learning rate (batch 128)", "τ vs batch size (lr 1e-3)"),
    )
    lines = [
        (lr, "lr", "tau", "τ: candidate loss < 0.5 log K (steps)", 1),
        (batch, "batch_size", "tau_examples", "τ in examples (ours)", 2),
        (batch, "batch_size", "tau", "τ in steps", 2),
        (batch, "batch_size", "tau_first_target", "paper: first-target < 0.5 log K (steps)", 2),
    ]
    for table, x, y, name, col in lines:
        if y in table and table[y].notna().any():
            fig.add_scatter(x=table[x], y=table[y], mode="lines+markers", name=name, row=1, col=col)
    measured = [w for w in windows or [] if w["window"] is not None]
    bounds = [w for w in windows or [] if w["window_at_least"] is not None]
    name = "paper: window 0.95 → 0.05 log K (steps, mean over seeds)"
    color = qualitative.Plotly[3]  # the window's points and its bounds in one colour
    if measured:
        fig.add_scatter(
            x=[w["lr"] for w in measured],
            y=[w["window"] for w in measured],
            mode="lines+markers",
            name=name,
            line={"color": color},
            row=1,
            col=1,
        )
    if bounds:
        fig.add_scatter(
            x=[w["lr"] for w in bounds],
            y=[w["window_at_least"] for w in bounds],
            mode="markers",
            marker={"symbol": "triangle-up-open", "size": 11, "color": color},
            name="paper's window, censored: at least",
            row=1,
            col=1,
        )
    fig.update_xaxes(type="log", title_text="learning rate", row=1, col=1)
    fig.update_xaxes(type="log", title_text="batch size", row=1, col=2)
    fig.update_yaxes(type="log", title_text="steps", row=1, col=1)
    fig.update_yaxes(type="log", title_text="steps or examples", row=1, col=2)
    return fig


def asymmetry_curves(curves: dict) -> go.Figure:
    """Claim 6: the mean over seeds of (B, z) -> A time / the reverse's at each threshold, one
    line per K and reverse; left the paper's timing (first-target loss below a fraction of its
    step-0 value), right ours (token accuracy). `curves`: {"paper"|"ours": {"K=5 az_to_b":
    [[threshold, ratio, at_least], ...]}}: where the forward run never reached a threshold,
    `at_least` (its last step / the reverse's time, averaged with the timed seeds) is drawn as
    an open triangle: the ratio is at least that. Above 1: the reverse is faster (the paper:
    1.7-4.4)."""
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=(
            "paper: first-target loss < fraction x its step-0 value",
            "ours: token accuracy >= threshold",
        ),
    )
    for col, key in ((1, "paper"), (2, "ours")):
        for i, (name, points) in enumerate(curves.get(key, {}).items()):
            color = qualitative.Plotly[i % len(qualitative.Plotly)]
            pts = [p for p in points if p[1] is not None]
            if pts:
                fig.add_scatter(
                    x=[p[0] for p in pts],
                    y=[p[1] for p in pts],
                    mode="lines+markers",
                    line_color=color,
                    name=f"{name} ({key})",
                    row=1,
                    col=col,
                )
            low = [p for p in points if len(p) > 2 and p[2] is not None]
            if low:
                fig.add_scatter(
                    x=[p[0] for p in low],
                    y=[p[2] for p in low],
                    mode="markers",
                    marker={"symbol": "triangle-up-open", "size": 10, "color": color},
                    name=f"{name} ({key}): at least (forward not reached)",
                    row=1,
                    col=col,
                )
        fig.add_hline(y=1, line_dash="dot", line_color="grey", row=1, col=col)
    fig.update_xaxes(type="log", autorange="reversed", title_text="fraction", row=1, col=1)
    fig.update_xaxes(title_text="token accuracy", row=1, col=2)
    for col in (1, 2):
        fig.update_yaxes(type="log", title_text="(B, z) → A time / the reverse's", row=1, col=col)
    fig.update_layout(
        title="Directional asymmetry over thresholds (above 1: the reverse faster; paper 1.7-4.4)"
    )
    return fig


def tau_vs_groups(rows: list[dict], fit: dict | None) -> go.Figure:
    """Claim 8, gradient cancellation: τ against the number of selector super-groups G (runs that
    never escaped drawn at their last step, hollow)."""
    fig = go.Figure()
    done = [r for r in rows if r["tau"] is not None]
    stuck = [r for r in rows if r["tau"] is None]
    fig.add_scatter(
        x=[r["z_groups"] for r in done], y=[r["tau"] for r in done], mode="markers", name="τ"
    )
    if stuck:
        fig.add_scatter(
            x=[r["z_groups"] for r in stuck],
            y=[r["final_step"] for r in stuck],
            mode="markers",
            marker_symbol="circle-open",
            name="no escape by this step",
        )
    if fit:
        xs = sorted({r["z_groups"] for r in done})
        fig.add_scatter(
            x=xs,
            y=[fit["C"] * x ** fit["alpha"] for x in xs],
            mode="lines",
            name=f"τ ∝ G^{fit['alpha']:.2f}",
        )
        fig.add_scatter(
            x=xs,
            y=[done[0]["tau"] * x / xs[0] for x in xs],
            mode="lines",
            line_dash="dot",
            name="linear in G (cancellation)",
        )
    fig.update_layout(
        title="τ vs selector super-groups G (paper: exponent ~0.02)",
        xaxis_title="G (super-groups of bases, each with its own K selectors)",
        yaxis_title="τ (steps)",
        xaxis_type="log",
        yaxis_type="log",
    )
    return fig


def timescale_vs_tau(rows: list[dict], rho: float | None) -> go.Figure:
    """Claim 8, AdamW timescale: τ against B / (η λ D) for every transitioned run of the sweeps."""
    fig = go.Figure()
    fig.add_scatter(
        x=[r["adamw_timescale"] for r in rows],
        y=[r["tau"] for r in rows],
        mode="markers",
        text=[r["run"] for r in rows],
        name="runs",
    )
    fig.update_layout(
        title=f"τ vs the AdamW timescale B / (η λ D) (Spearman ρ = "
        f"{'-' if rho is None else f'{rho:.2f}'}; paper: anti-correlated)",
        xaxis_title="B / (η λ D) (epochs)",
        yaxis_title="τ (steps)",
        xaxis_type="log",
        yaxis_type="log",
    )
    return fig


def _mean_and_range(rows: list[dict], key: str) -> dict:
    """A scatter's y (each row's `key`) and error bars to its `<key>_range` [lo, hi]."""
    return {
        "y": [r[key] for r in rows],
        "error_y": {
            "type": "data",
            "array": [r[f"{key}_range"][1] - r[key] for r in rows],
            "arrayminus": [r[key] - r[f"{key}_range"][0] for r in rows],
        },
    }


def noise_only_times(rows: list[dict], parent: str, tau: int) -> go.Figure:
    """The noise-only study's summary (`studies.interventions.summary` by noise scale): steps
    left to τ per C, mean over seeds with the range as error bars (a C where no seed escaped at
    0, its count in the hover), and beside it, on a second axis, the mean step down ḡ (`drift`),
    so a longer wait can be read against a slower pace."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    done = [r for r in rows if r["remaining"] is not None]
    fig.add_scatter(
        x=[r["noise_scale"] for r in done],
        **_mean_and_range(done, "remaining"),
        mode="lines+markers",
        name="steps left to τ (mean, range over seeds)",
        text=[f"{r['escaped']}/{r['seeds']} escaped" for r in done],
        hovertemplate="C = %{x}: %{y} steps (%{text})<extra></extra>",
    )
    paced = [r for r in rows if r.get("drift") is not None]
    fig.add_scatter(
        x=[r["noise_scale"] for r in paced],
        y=[r["drift"] for r in paced],
        mode="markers",
        marker_symbol="diamond-open",
        name="step down the mean gradient ḡ (mean per step)",
        secondary_y=True,
    )
    fig.update_layout(title=f"Noise-only branches of {parent} (τ {tau}): the wait by noise scale C")
    fig.update_xaxes(title_text="noise scale C (0: full batch, 1: the ordinary step)")
    fig.update_yaxes(title_text="steps from the branch to τ", secondary_y=False)
    fig.update_yaxes(title_text="-Δθ·ḡ / |ḡ| per step", secondary_y=True)
    return fig


def tau_per_k(rows: list[dict]) -> go.Figure:
    """Claim 2's shape: per K at n_bases = 1000 (`studies.sweeps.per_k`), our τ over the paper's
    published τ at the same D, the mean over seeds with their range; 1 is agreement. A ratio that
    climbs with K is what makes our α_D larger than the paper's."""
    fig = go.Figure()
    fig.add_scatter(
        x=[r["k"] for r in rows],
        **_mean_and_range(rows, "ratio"),
        mode="lines+markers",
        name="our τ / the paper's (mean over seeds, range)",
        text=[f"ours {r['tau']:.0f} ({r['seeds']} seeds), paper {r['paper_tau']}" for r in rows],
        hovertemplate="K = %{x}: %{y:.2f} (%{text})<extra></extra>",
    )
    fig.add_hline(y=1.0, line_dash="dot", annotation_text="agreement")
    fig.update_layout(
        title="τ per K at n_bases = 1000: ours over the paper's published point",
        xaxis_title="K (D = 1000 K)",
        yaxis_title="τ ours / τ paper",
    )
    return fig
