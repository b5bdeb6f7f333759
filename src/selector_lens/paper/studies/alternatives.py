"""Claim 8: the seven mechanisms the paper rules out, each a sub-claim with its own measurement.

Gradient cancellation has a study of its own (τ against the number of selector super-groups G);
the others read what the other studies measured (claims 3, 4 and 5) or an instrument on the
baseline's first seed (representation statistics, the weight trajectory), and AdamW's timescale
is read across every run of the sweeps. Each verdict rule lives in `verdicts.py`.
"""

from __future__ import annotations

import math

from selector_lens.paper import verdicts
from selector_lens.paper.presets import PRESETS
from selector_lens.paper.studies.base import (
    CLAIMS,
    Claim,
    Setup,
    Study,
    _fmt,
    _save,
    _settings,
    geometry_runs,
)
from selector_lens.runs.run import Run, run_table
from selector_lens.viz import study_figures

TITLE = "Falsified alternatives"  # CLAIMS[8]
PAPER = {  # key: (name, the paper's finding)
    "cancellation": (
        "gradient cancellation",
        "groups sharing z cancel each other's gradient: τ ~flat in G (exponent ~0.02)",
    ),
    "barrier": (
        "barrier crossing",
        "noise-driven escape (Kramers): more noise escapes slower, not faster",
    ),
    "incremental": ("incremental coverage", "groups cross together, not one by one"),
    "spinodal": ("spinodal", "a minimum turning unstable: λmin < 0 throughout the plateau already"),
    "timescale": ("AdamW timescale", "B / (η λ D) is anti-correlated with τ across the sweeps"),
    "collapse": (
        "neural collapse",
        "within-B variance up 1.15x, between-B down 0.61x across the transition (K = 20)",
    ),
    "norm_peak": ("weight-norm peak", "deep-grokking style: the total norm grows monotonically"),
}
SWEEP_PARTS = ("seeds", "scaling/d", "scaling/k", "noise/lr", "noise/batch_size", "sharing")


def _sub(key: str, ours: str, verdict: str, settings: str) -> Claim:
    name, paper = PAPER[key]
    return Claim(8, f"{TITLE}: {name}", paper, ours, verdict, settings)


# --- gradient cancellation: its own runs --------------------------------------------------------
def sharing(setup: Setup) -> Study:
    """τ against G super-groups of bases, each with its own K selectors (`z_groups`), at fixed K
    and D: cancellation across the groups that share a z predicts τ about linear in G."""
    import pandas as pd

    from selector_lens.runs.transition import power_law_fit

    p = PRESETS["sharing"][setup.scale]
    runs = setup.runs("sharing")
    settings = f"{_settings(p['base'])}; G in {p['grid']['z_groups']}"
    if not runs:
        return Study(
            "sharing",
            {"pending": "no finished run yet"},
            [],
            [_sub("cancellation", "no finished run yet", verdicts.NO_RESULT, settings)],
        )
    table = run_table([r.path for r in runs]).sort_values("z_groups")
    rows = table[["run", "z_groups", "tau", "final_step", "plateau_over_log_k"]].to_dict("records")
    for r in rows:
        r["run"] = r["run"].rsplit("/", 1)[-1]
        r["tau"] = None if pd.isna(r["tau"]) else int(r["tau"])
    done = [r for r in rows if r["tau"] is not None]
    fit = None
    if len({r["z_groups"] for r in done}) >= 2:
        f = power_law_fit([r["z_groups"] for r in done], [r["tau"] for r in done])
        ci = [float(x) for x in f["alpha_ci"]]
        fit = {k: f[k] for k in ("alpha", "C", "r2", "n")}
        fit["alpha_ci"] = ci if all(math.isfinite(x) for x in ci) else None  # 3+ points
    base_escaped = any(r["z_groups"] == 1 for r in done)
    stuck = base_escaped and any(r["tau"] is None and r["z_groups"] > 1 for r in rows)
    result = {
        "tau_definition": "first eval step with candidate_loss < 0.5 * log K",
        "runs": rows,
        "fit": fit,
        "more_groups_never_escape": stuck,
    }
    _save(setup.dir("sharing"), "sharing", result)
    verdict = verdicts.cancellation(fit and fit["alpha"], fit and fit.get("alpha_ci"), stuck)
    ours = "τ at G = " + ", ".join(f"{r['z_groups']}: {_tau_text(r)}" for r in rows)
    if fit:
        ci = fit.get("alpha_ci")
        ours += f"; τ ∝ G^{fit['alpha']:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
    figs = [study_figures.tau_vs_groups(rows, fit)]
    return Study("sharing", result, figs, [_sub("cancellation", ours, verdict, settings)])


def _tau_text(row: dict) -> str:
    return str(row["tau"]) if row["tau"] else f"no escape by {row['final_step']}"


# --- the other six, and the claim ---------------------------------------------------------------
def alternatives(setup: Setup, studies: dict[str, Study], seeds: list[Run]) -> Study:
    """Claim 8 and its seven sub-claims, from the `sharing`, `collective`, `noise` and `geometry`
    studies, the sweeps' runs, and the first seed's representations and weight trajectory."""
    result, figs, subs = {}, [], []
    subs += studies["sharing"].claims
    figs += studies["sharing"].figures

    noise = studies["noise"]
    slower = bool(noise.result.get("more_noise_slows_escape"))
    verdict = verdicts.barrier_crossing(noise.claims[0].verdict, slower)
    ours = (
        "claim 4 has no result yet"
        if verdict == verdicts.NO_RESULT
        else f"the highest lr escapes {'later than lr 1e-3, or never' if slower else 'no later than lr 1e-3'}"
    )
    subs.append(_sub("barrier", ours, verdict, "from claim 4 (noise study)"))

    c = studies["collective"].claims[0]
    subs.append(
        _sub("incremental", f"claim 3: {c.verdict}", verdicts.incremental(c.verdict), c.settings)
    )

    rows = studies["geometry"].result.get("rows", [])
    plateau = [r for r in rows if r["phase"] in ("pre", "mid")]
    ours = (
        "; ".join(f"{r['run']} {r['phase']}: λmin {_fmt(r['lambda_min'])}" for r in plateau)
        or "no Hessian on the plateau yet"
    )
    subs.append(_sub("spinodal", ours, verdicts.spinodal(plateau), "from claim 5 (geometry study)"))

    timescale = _timescale(setup)
    result["timescale"] = timescale
    if timescale["runs"]:
        figs.append(study_figures.timescale_vs_tau(timescale["runs"], timescale["spearman"]))
    rho = timescale["spearman"]
    subs.append(
        _sub(
            "timescale",
            f"Spearman ρ(τ, B / (η λ D)) = {_fmt(rho, '.2f')} over {len(timescale['runs'])} runs "
            f"(τ in epochs: {_fmt(timescale['spearman_epochs'], '.2f')}); not an independent "
            "test: B / (η λ D) falls as D and η grow, and claims 2 and 4 say τ grows with both, so "
            "this follows from them (reported, not counted in claim 8)",
            verdicts.adamw_timescale(rho, len(timescale["runs"])),
            f"every transitioned run of {', '.join(SWEEP_PARTS)}",
        )
    )

    first = seeds[0] if seeds and seeds[0].tau() else None
    collapse = [_collapse(r) for r in geometry_runs(setup, seeds) if r.tau()]
    result["collapse"] = collapse
    subs.append(
        _sub(
            "collapse",
            "; ".join(
                f"{c['run']}, last layer, post / pre: within-B x{c['within_ratio']:.2f}, "
                f"between-B x{c['between_ratio']:.2f}"
                for c in collapse
            )
            or "no transitioned run yet",
            verdicts.neural_collapse(
                min((c["within_ratio"] for c in collapse), default=None),
                max((c["between_ratio"] for c in collapse), default=None),
            ),
            "representation statistics at the a1-predicting position: the seeds study's first "
            "run and the Hessian's other runs; the verdict reads the smallest within-B ratio and "
            "the largest between-B ratio (the paper: within up, between down)",
        )
    )

    norm = _norm_peak(first) if first else None
    result["weight_norm"] = norm
    subs.append(
        _sub(
            "norm_peak",
            "no transitioned seed yet"
            if norm is None
            else f"{norm['run']}: total norm {norm['start']:.1f} -> {norm['end']:.1f}, largest fall "
            f"below its running max {norm['drawdown']:.2%} (at step {norm['drawdown_step']}; "
            f"τ {norm['tau']})",
            verdicts.weight_norm_peak(norm and norm["drawdown"]),
            "weight trajectory over every checkpoint of the seeds study's first run",
        )
    )

    result["sub_claims"] = {s.title.split(": ", 1)[1]: s.verdict for s in subs}  # by name
    _save(setup.dir("alternatives"), "alternatives", result)
    counted = [s for s in subs if s.title.split(": ", 1)[1] not in verdicts.DERIVED]
    ruled_out = [s.title.split(": ", 1)[1] for s in counted if s.verdict == verdicts.REPRODUCED]
    main = Claim(
        8,
        *CLAIMS[8],
        f"{len(ruled_out)} of {len(counted)} independent alternatives ruled out here"
        + (f" ({', '.join(ruled_out)})" if ruled_out else "")
        + f"; {', '.join(verdicts.DERIVED)} follows from claims 2 and 4 and is not counted",
        verdicts.falsified([s.verdict for s in counted]),
        "the sub-claims below",
    )
    return Study("alternatives", result, figs, [main, *subs])


def _timescale(setup: Setup) -> dict:
    """τ (steps, and epochs) against B / (η λ D) over every transitioned run of the sweeps."""
    paths = {r.path for part in SWEEP_PARTS for r in setup.runs(part)}
    if not paths:
        return {"runs": [], "spearman": None, "spearman_epochs": None}
    table = run_table(sorted(paths))
    table = table[table.tau.notna() & (table.weight_decay > 0)].copy()
    table["adamw_timescale"] = table.batch_size / (table.lr * table.weight_decay * table.D)
    table["tau_epochs"] = table.tau * table.batch_size / table.D
    table["run"] = table.run.map(lambda p: p.rsplit("/", 1)[-1])
    keep = ["run", "k", "D", "lr", "batch_size", "weight_decay", "tau", "tau_epochs"]
    rows = table[keep + ["adamw_timescale"]].to_dict("records")
    enough = len(rows) >= 2

    def rho(col):  # Spearman: Pearson's on average ranks (pandas' own needs scipy)
        return float(table[col].rank().corr(table.adamw_timescale.rank()))

    return {
        "definition": "B / (η λ D): AdamW's decay time 1 / (η λ) steps, in epochs",
        "runs": rows,
        "spearman": rho("tau") if enough else None,
        "spearman_epochs": rho("tau_epochs") if enough else None,
    }


def _collapse(run: Run) -> dict:
    """Within- and between-base variance of the last layer at post over pre."""
    from selector_lens.analysis.representations import representation_stats

    phases = run.phases()
    stats = representation_stats(run, [phases["pre"], phases["post"]])
    last = {r["step"]: r for r in stats[stats.layer == stats.layer.max()].to_dict("records")}
    pre, post = last[phases["pre"]], last[phases["post"]]
    return {
        "run": run.path.name,
        "pre": int(phases["pre"]),
        "post": int(phases["post"]),
        "within_ratio": post["within"] / pre["within"],
        "between_ratio": post["between"] / pre["between"],
    }


def _norm_peak(run: Run) -> dict:
    """The total weight norm's largest fall below its running maximum, as a fraction of it."""
    import numpy as np

    from selector_lens.analysis.trajectory import weight_trajectory

    traj = weight_trajectory(run)
    norm = traj.total_norm.to_numpy()
    peak = np.maximum.accumulate(norm)
    fall = (peak - norm) / peak
    i = int(fall.argmax())
    return {
        "run": run.path.name,
        "tau": run.tau(),
        "start": float(norm[0]),
        "end": float(norm[-1]),
        "drawdown": float(fall[i]),
        "drawdown_step": int(traj.step.iloc[i]),
    }
