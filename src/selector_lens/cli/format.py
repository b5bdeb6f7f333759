"""How the command line prints: rich tables for people, one JSON object for --json. Every
command's output goes through here, so numbers and missing values look the same everywhere."""

from __future__ import annotations

import json
from pathlib import Path


def json_line(obj) -> None:
    """One JSON object on stdout (numpy scalars as numbers)."""
    print(json.dumps(obj, default=lambda o: o.item() if hasattr(o, "item") else str(o)))


def console():
    """Rich's console; out of a terminal (a pipe, a file, CI) as wide as a table needs, where rich
    would squeeze it into 80 columns and wrap every cell."""
    from rich.console import Console

    plain = Console()
    return plain if plain.is_terminal else Console(width=200)


MISSING = "-"  # the one symbol for a missing value (None, NaN), in every table


def number(v) -> str:
    """A table cell: 3 decimals where they say something, 3 significant digits (scientific
    when needed) below 0.001 and from 10,000 (lr 3e-4 prints as 0.0003, not 0.000)."""
    import math

    if v is None or (isinstance(v, float) and math.isnan(v)):
        return MISSING
    if not isinstance(v, float) or isinstance(v, bool):
        return str(v)
    if v == 0 or 1e-3 <= abs(v) < 1e4:
        return f"{v:.3f}"
    return f"{v:.3g}"


def table(title: str, columns: list[str], rows: list[list]) -> None:
    """A rich table: numbers by `number`, a missing value as MISSING. The title is a plain line
    above it: a rich title wraps at the table's width, splitting a long path or "log K 1.099"."""
    from rich.table import Table

    print(title)
    out = Table()
    for c in columns:
        out.add_column(c, justify="right")
    for r in rows:
        out.add_row(*[number(v) for v in r])
    console().print(out)


def train_summary(s: dict) -> None:
    """The table `train` ends with."""
    from rich.table import Table

    def fmt(v, spec=".4g"):
        return "-" if v is None else format(v, spec) if isinstance(v, float) else str(v)

    table = Table(title=f"{s['run']} ({s['status']})", show_header=False)
    if "plateau_over_log_k" not in s:  # another task: its transition and its last row
        definition = (s.get("tau_definition") or "").strip().splitlines()[0:1]
        table.add_row(
            f"transition ({definition[0].rstrip('.') if definition else 'its step'})",
            fmt(s["tau"]) if s["tau"] is not None else "no transition",
        )
        table.add_row("final step", fmt(s["final_step"]))
        for key, v in s.items():
            if key.startswith("final_") and key != "final_step" and isinstance(v, (int, float)):
                table.add_row(key.removeprefix("final_"), fmt(v))
        table.add_row("wall time (s)", fmt(s.get("wall_time_s"), ".1f"))
        console().print(table)
        return
    table.add_row("plateau height / log K", fmt(s["plateau_over_log_k"], ".3f"))
    table.add_row(
        "tau (cand. loss < 0.5 log K)", fmt(s["tau"]) if s["tau"] is not None else "no transition"
    )
    table.add_row("final step", fmt(s["final_step"]))
    table.add_row("final candidate loss", fmt(s["final_candidate_loss"]))
    table.add_row("final candidate accuracy", fmt(s["final_candidate_acc"], ".3f"))
    table.add_row("final Δz, z-deranged gap (nats)", fmt(s["final_dz"], ".3f"))
    table.add_row("wall time (s)", fmt(s["wall_time_s"], ".1f"))
    console().print(table)


def sweep_table(root, results, wall, executor) -> None:
    table(
        f"{root}: {len(results)} runs in {wall:.0f} s ({executor})",
        ["run", "outcome", "τ / error"],
        [
            [Path(r["run"]).name, r["outcome"], r.get("error") or r.get("tau") or "no transition"]
            for r in results
        ],
    )


def fit_tables(sweep_dir, runs, result) -> None:
    """The runs of a sweep, then its power-law fits, one table per group of runs that share every
    option but K, D and the seed (`transition.fit_groups`)."""
    table(
        f"{sweep_dir}: runs",
        ["run", "K", "D", "direction", "lr", "batch", "τ", "τ (examples)", "plateau / log K"],
        [
            [
                Path(r.run).name,
                r.k,
                r.D,
                r.direction,
                r.lr,
                r.batch_size,
                r.tau,
                r.tau_examples,
                r.plateau_over_log_k,
            ]
            for r in runs.itertuples()
        ],
    )
    for group in result["groups"]:
        fits, rows = group["fits"], []
        for name, f in [("τ vs D", fits["tau_vs_D"])] + [
            (f"τ vs K at D={d}", f) for d, f in fits["tau_vs_K"].items()
        ]:
            if f:
                lo, hi = f["alpha_ci"]
                rows.append([name, f"{f['alpha']:.3f} [{lo:.3f}, {hi:.3f}]", f["r2"], f["n"]])
        if fits["k_beyond_D"] is not None:
            rows.append(
                [
                    "K effect beyond D (residual slope)",
                    fits["k_beyond_D"],
                    None,
                    fits["n_transitioned"],
                ]
            )
        where = ", ".join(
            f"{k} {number(v) if isinstance(v, float) else v}" for k, v in group["options"].items()
        )
        table(
            f"power-law fits{' at ' + where if where else ''} ({group['n_runs']} runs; 95% "
            "bootstrap CI); paper: α_D = 1.19 [1.14, 1.31], α_K ≈ 0",
            ["fit", "exponent", "R²", "points"],
            rows,
        )


def ablation_table(r, records: list[dict], mode: str, keep_only: bool, all_heads: bool) -> None:
    """`ablate-head`'s table: per step the most damaging head first (kept alone: the best one
    first), marked; the selector's candidate loss and Δz, another task's headline metric."""
    from selector_lens.task.protocol import headline

    task = r.config.task
    selector = task.name == "selector"
    rank = "candidate_loss" if selector else headline(task)
    what = "kept alone" if keep_only else f"{mode}-ablated"
    tau = r.tau()
    records.sort(key=lambda x: (x["step"], -(x["delta"][rank] or 0) * (1, -1)[keep_only]))
    top = {}
    for x in records:
        top.setdefault(x["step"], (x["layer"], x["head"]))

    def phase_of(x):
        frac = "" if not tau else f" ({x['step'] / tau:.2f} τ)"
        return f"{x['phase'] or ''}{frac}".strip() or None

    def head_of(x):
        marked = all_heads and top[x["step"]] == (x["layer"], x["head"])
        return f"L{x['layer']}H{x['head']}" + (" ◀ top" if marked else "")

    if selector:
        title = f"log K {task.log_k:.3f}"
        columns = ["cand. loss", "ablated", "Δ cand.", "Δ loss", "Δz clean", "Δ Δz"]
        cells = lambda x: [  # noqa: E731
            x["clean"]["candidate_loss"],
            x["ablated"]["candidate_loss"],
            x["delta"]["candidate_loss"],
            x["delta"]["loss"],
            x["clean"]["dz"],
            x["delta"]["dz"],
        ]
    else:
        title = f"the {task.name} task, heads ranked by {rank}"
        others = [m for m in records[0]["delta"] if m != rank] if records else []
        columns = [rank, "ablated", f"Δ {rank}", *(f"Δ {m}" for m in others)]
        cells = lambda x: [  # noqa: E731
            x["clean"][rank],
            x["ablated"][rank],
            x["delta"][rank],
            *(x["delta"][m] for m in others),
        ]
    table(
        f"{r.path}: heads {what}; losses in nats; τ {tau if tau else 'none'}; {title}",
        ["step", "phase", "head", *columns],
        [[x["step"], phase_of(x), head_of(x), *cells(x)] for x in records],
    )
