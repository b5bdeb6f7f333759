"""Claims 1, 3, 5 and 7: several seeds of one config (marginal first, collective transition,
loss geometry, the internal cascade)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from selector_lens.errors import SelectorLensError
from selector_lens.paper import verdicts
from selector_lens.paper.presets import GEOMETRY, PRESETS
from selector_lens.paper.studies import sentences
from selector_lens.paper.studies.base import CLAIMS, Claim, Study, _save, _settings, pending
from selector_lens.runs.run import Run
from selector_lens.viz import study_figures

# --- claims 1, 3, 5, 7: several seeds of one config ----------------------------------------------
PAPER_SOLVED = 0.8  # the paper counts a group solved at >= 80% of its examples (claim 3)
PAPER_ONSET = 0.9  # the paper's first-target onset: first-target loss < 0.9 log K (claim 7)


def marginal_first(runs: list[Run], out: Path | None, scale: str) -> Study:
    """Claim 1: plateau at log K, then a sharp drop to ~0."""
    from selector_lens.viz import loss_curves

    if not runs:
        return pending("marginal_first", 1, "no finished run yet")
    rows = []
    for run in runs:
        m, log_k, tau = run.metrics, run.config.task.log_k, run.tau()
        s = run.info.get("summary") or {}
        cand = m.candidate_loss.to_numpy()
        steps = m.step.to_numpy()
        hi = steps[np.argmax(cand < 0.9 * log_k)] if (cand < 0.9 * log_k).any() else None
        lo = steps[np.argmax(cand < 0.1 * log_k)] if (cand < 0.1 * log_k).any() else None
        plateau = m[(m.step >= 0.25 * tau) & (m.step <= 0.75 * tau)] if tau else m
        rows.append(
            {
                "run": run.path.name,
                "tau": tau,
                "plateau_over_log_k": s.get("plateau_over_log_k"),
                "first_target_on_plateau": float(plateau.first_target_loss.median()),
                "log_k": log_k,
                "log_36": math.log(36),
                "final_candidate_loss": float(cand[-1]),
                "drop_90_to_10_over_tau": (lo - hi) / tau
                if tau and hi is not None and lo is not None
                else None,
            }
        )
    verdict = verdicts.marginal_first(rows)
    result = {"runs": rows}
    figs = [loss_curves(runs[0].metrics, runs[0].config.task.log_k, runs[0].tau())]
    _save(out, "marginal_first", result)
    ours = sentences.marginal_first(rows)
    claim = Claim(
        1,
        *CLAIMS[1],
        ours,
        verdict,
        _settings(PRESETS["seeds"][scale]["base"], seeds=[r.config.seed for r in runs]),
    )
    return Study("marginal_first", result, figs, [claim])


def collective(runs: list[Run], out: Path | None, scale: str) -> Study:
    """Claim 3 (and half of 8): groups cross together, not one by one (the seeds; at the paper
    scale also K = 20)."""
    from selector_lens.runs.transition import collective_transition
    from selector_lens.viz import group_transition

    if not runs:
        return pending("collective", 3, "no finished run yet")
    rows, ours = [], []
    for run in runs:
        log, k, tau = run.metric_rows(), run.config.task.k, run.tau()
        paper = collective_transition(log, k, tau, PAPER_SOLVED, at_least=True)
        rows.append({"run": run.path.name, "tau": tau, **paper})
        ours.append({"run": run.path.name, "tau": tau, **collective_transition(log, k, tau)})
    verdict = verdicts.collective(rows)
    result = {"runs": rows, "runs_ours": ours, "verdict_reads": "runs (solved: >= 80%)"}
    figs = [group_transition(runs[0].metrics, runs[0].config.task.k)]
    _save(out, "collective", result)
    text = (
        f"the paper's (solved: >= {PAPER_SOLVED:.0%} of a group's K examples): "
        + sentences.collective(rows)
        + f"; ours (solved: > 50%): {sentences.collective(ours)}"
    )
    claim = Claim(
        3,
        *CLAIMS[3],
        text,
        verdict,
        f"runs {', '.join(r['run'] for r in rows)} (the seeds, then the runs kept whole past τ); "
        f"the verdict counts a group solved at >= {PAPER_SOLVED:.0%} of its K examples (the "
        "paper's), ours at > 50% beside it",
    )
    return Study("collective", result, figs, [claim])


def cascade_study(runs: list[Run], out: Path | None, scale: str) -> Study:
    """Claim 7: the routing head, its onset, Δz's lead over τ, necessity and sufficiency."""

    from selector_lens.analysis.ablation import ablate_each_head
    from selector_lens.analysis.routing import cascade, find_routing_head
    from selector_lens.runs.transition import first_below

    if not runs:
        return pending("cascade", 7, "no finished run yet")
    rows = []
    for run in runs:
        if not run.tau():
            rows.append({"run": run.path.name, "tau": None})
            continue
        found = find_routing_head(run)
        c = cascade(run, head=found["routing_head"])
        phases = run.phases()
        every = ablate_each_head(
            run, sorted({phases[p] for p in ("pre", "mid", "post")})
        )  # stored: the dashboard's
        layer, head = found["routing_head"]
        mine = every[(every.layer == layer) & (every["head"] == head)].set_index("step")
        delta = {
            p: float(mine.loc[phases[p], "delta_candidate_loss"]) for p in ("pre", "mid", "post")
        }
        log_k = run.config.task.log_k
        onset = first_below(run.metric_rows(), "first_target_loss", PAPER_ONSET * log_k)
        rows.append(
            {
                "run": run.path.name,
                "tau": c["tau"],
                "first_target_onset": onset,
                "paper_lead_steps": None
                if onset is None or c["dz_onset"] is None
                else onset - c["dz_onset"],
                "paper_lead_frac": None
                if onset is None or c["dz_onset"] is None
                else (onset - c["dz_onset"]) / c["tau"],
                "routing_head": c["routing_head"],
                "attention_agrees": found["attention_agrees"],
                "attn_onset": c["attn_onset"],
                "dz_onset": c["dz_onset"],
                "attn_lead_frac": c["attn_lead_frac"],
                "dz_lead_frac": c["dz_lead_frac"],
                "mean_ablation_delta": delta,
                "best_alone": found["best_sufficient_head"],
                "best_alone_candidate_loss": found["best_sufficient_candidate_loss"],
                "log_k": run.config.task.log_k,
            }
        )
    verdict = verdicts.cascade(rows)
    result = {
        "runs": rows,
        "dz_threshold": 0.1,
        "lead_definitions": {
            "paper_lead_frac": f"the paper's: first-target onset (loss < {PAPER_ONSET} log K) "
            "minus Δz onset (Δz > 0.1), over τ",
            "dz_lead_frac": "ours: τ (candidate loss < 0.5 log K) minus Δz onset, over τ",
        },
        "verdict_reads": "paper_lead_frac",
        "ablation": "mean, at pre = τ/4, mid = 3τ/4, post = 1.5τ",
    }
    figs = [study_figures.cascade_onsets(rows)]
    _save(out, "cascade", result)
    ours = sentences.cascade(rows)
    claim = Claim(
        7,
        *CLAIMS[7],
        ours,
        verdict,
        "the seeds study's runs; routing head = largest mean-ablation increase at post; Δz onset = first "
        f"eval with Δz > 0.1; the verdict's lead: Δz onset before the first-target onset (loss < "
        f"{PAPER_ONSET} log K, the paper's), ours before τ beside it",
    )
    return Study("cascade", result, figs, [claim])


def geometry(
    runs: list[Run], out: Path | None, scale: str, compare: list[Run] | None = None
) -> Study:
    """Claim 5: an anisotropic saddle on the plateau; noise along the high-curvature directions.

    At the phases of each run (the seeds study's first, and `GEOMETRY[scale]["also"]`), on a
    subsample of `sample` examples; then at the first run's `mid` for each size of `sample_sweep`
    (None: the whole dataset), since the estimates depend on the subsample; and there once more
    with the `convergence` settings (more Lanczos steps), whose λmin after each step says whether
    the phases' iterations were enough. On `compare` (default: the first run) at pre and mid,
    the paper code's estimator (`shifted-power`) beside Lanczos, on the same examples."""

    from selector_lens.analysis.landscape import landscape

    if not runs:
        return pending("geometry", 5, "no finished run yet")
    settings = GEOMETRY[scale]
    kw = {
        k: v
        for k, v in settings.items()
        if k not in ("also", "sample_sweep", "convergence", "compare")
    }
    rows = []
    for run in runs:
        if not run.tau():
            steps = [run.steps[len(run.steps) // 2], run.steps[-1]]
            names = {steps[0]: "middle", steps[1]: "final"}
        else:
            names = {s: p for p, s in run.phases().items() if p != "final"}
            steps = sorted(names)
        df = landscape(run, steps, **kw)
        rows += [
            {"run": run.path.name, "phase": names[r["step"]], **r}
            for r in df.to_dict(orient="records")
        ]
    sweep, convergence = [], []
    if runs[0].tau():
        mid = runs[0].phases()["mid"]

        def at_mid(**over):
            df = landscape(runs[0], [mid], **{**kw, **over})
            return [
                {"run": runs[0].path.name, "phase": "mid", **r}
                for r in df.to_dict(orient="records")
            ]

        if settings.get("convergence"):  # first: the cheaper of the two
            convergence = at_mid(**settings["convergence"])
        for size in settings.get("sample_sweep", []):
            sweep += at_mid(sample=runs[0].config.task.n_examples if size is None else size)
    plateau = [r for r in rows if r["phase"] in ("pre", "mid")]
    compared = _estimators(runs[:1] if compare is None else compare, kw, settings)
    subclaims = verdicts.geometry_subclaims(plateau, compared)
    result = {
        "settings": kw,
        "runs": [r.path.name for r in runs],
        "rows": rows,
        "sample_sweep": sweep,
        "convergence": convergence,
        "estimators": compared,
        "subclaims": subclaims,
    }
    figs = [study_figures.hessian_extremes(rows, kw["sample"])]
    if sweep:
        figs.append(study_figures.hessian_vs_sample(sweep, runs[0].path.name))
    if convergence:
        figs.append(study_figures.hessian_by_lanczos_step(convergence[0]))
    if compared:
        figs.append(study_figures.estimators(compared))
    _save(out, "geometry", result)
    verdict = verdicts.geometry(subclaims)
    ours = sentences.geometry(rows, sweep, convergence, compared, subclaims)
    claim = Claim(
        5,
        *CLAIMS[5],
        ours,
        verdict,
        f"runs {', '.join(r.path.name for r in runs)}; Hessian of the training loss on a seeded subsample of {kw['sample']} "
        f"examples; power iteration ({kw['power_iters']}) for λmax, Lanczos ({kw['lanczos_iters']}) for "
        f"λmin and the top {kw['top_k']} directions; noise from {kw['noise_batches']} minibatches of the run's "
        "batch size; the paper's estimator (power iteration on H - (λmax + 1) I, stopped once "
        "|cos(v, v_next)| > 0.9999 after iteration 10) beside Lanczos on the same checkpoints and "
        "examples; the verdict: the saddle, the anisotropy by Lanczos and the noise",
    )
    return Study("geometry", result, figs, [claim])


def _estimators(runs: list[Run], kw: dict, settings: dict) -> list[dict]:
    """Lanczos and the paper code's shifted power iteration on the same checkpoints (each run's
    pre and mid) and the same seeded subsample (`settings["compare"]["sample"]`)."""
    from selector_lens.analysis.landscape import landscape

    sample = settings.get("compare", {}).get("sample", kw["sample"])
    lanczos_kw = {k: v for k, v in kw.items() if k != "sample"}
    rows = []
    for run in runs:
        if not run.tau():
            continue
        phases = {s: p for p, s in run.phases().items() if p in ("pre", "mid")}
        steps = sorted(phases)
        try:
            ours = landscape(run, steps, sample=sample, **lanczos_kw).set_index("step")
            paper = landscape(run, steps, sample=sample, estimator="shifted-power")
        except SelectorLensError:  # a published run without those tables: the others still count
            continue
        paper = paper.set_index("step")
        for step in steps:
            a, b = ours.loc[step], paper.loc[step]
            rows.append(
                {
                    "run": run.path.name,
                    "phase": phases[step],
                    "step": step,
                    "sample": int(a["sample"]),
                    "lanczos_lambda_max": float(a["lambda_max"]),
                    "lanczos_lambda_min": float(a["lambda_min"]),
                    "lanczos_ratio": float(a["ratio"]),
                    "lanczos_lambda_min_by_step": list(a["lambda_min_by_step"]),
                    "shifted_lambda_max": float(b["lambda_max"]),
                    "shifted_lambda_min": float(b["lambda_min"]),
                    "shifted_ratio": float(b["ratio"]),
                    "shifted_iters": int(b["iters_min"]),
                    "shifted_lambda_min_by_iter": list(b["lambda_min_by_iter"]),
                }
            )
    return rows
