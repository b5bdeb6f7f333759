"""Interventions on the dynamics (branches of a run with kept training states): is the routing
head necessary for the escape, and does gradient noise hold the plateau?

Each table is built from the branches' own logs, so it rebuilds from published runs; with
`train=True` the missing branches are made and trained first (`training.branch.branches`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from selector_lens.errors import SelectorLensError
from selector_lens.paper import verdicts
from selector_lens.paper.studies.base import Claim, Study, _save
from selector_lens.runs import rundir
from selector_lens.runs.run import Run
from selector_lens.training.branch import Changes, branches
from selector_lens.training.noise import REFERENCE_X, REFRESH_EVERY

NECESSITY_FRACTIONS = (0.25, 0.75)  # branch points, in units of the parent's τ
NOISE_FRACTION = 0.5
NOISE_CHANGES = {"lr x0.25": (0.25, 1), "lr x0.5": (0.5, 1), "lr x2": (2, 1), "lr x4": (4, 1)}
NOISE_CHANGES["batch x4"] = (1, 4)  # (lr factor, batch factor)
BUDGET_OVER_TAU = 3  # a branch that has not escaped by 3 x the parent's τ "never" does
# the noise-only study (issue 44): the minibatch noise scaled by C, nothing else changed; each
# branch stops one evaluation after its τ (its wait is all the study reads)
NOISE_SCALES = (0.0, 0.5, 1.0, 2.0, 4.0)
NOISE_ONLY_STOP = {"early_stop_frac": 0.5, "early_stop_evals": 2}


def noise_only_specs(budget: int) -> list[Changes]:
    """The noise-only study's branches, one per C in NOISE_SCALES."""
    options = {"steps": budget, **NOISE_ONLY_STOP}
    return [Changes(options=options, noise_scale=c) for c in NOISE_SCALES]


def nearest_state(parent: Run, target: float, out: Path | None = None) -> int:
    """The branch point nearest `target`: among the parent's kept states, or, for a published
    parent (no states), among the branch points under `out` (`step<S>/`)."""
    steps = parent.state_steps or sorted(
        int(p.name[4:]) for p in (out.glob("step*") if out and out.is_dir() else [])
    )
    if not steps:
        raise SelectorLensError(f"{parent.path} kept no training states (train with --state-every)")
    return min(steps, key=lambda s: (abs(s - target), s))


def least_used_head(parent: Run, step: int, other_than: tuple[int, int]) -> tuple[int, int]:
    """The layer-0 head, other than `other_than` (the routing head), with the least attention
    from the a1 position to z at `step`'s eval."""
    row = next(r for r in parent.metric_rows() if r["step"] >= step)
    layer0 = np.array(row["attn_to_z"][0], dtype=float)
    if other_than[0] == 0:
        layer0[other_than[1]] = np.inf
    return 0, int(layer0.argmin())


def _trained(parent: Run, step: int, out: Path, specs: list[Changes], seeds, train: bool):
    """The branches' runs: trained now where missing (`train`), else those that finished."""
    where = out / f"step{step}"
    names = [f"{s.label}-s{seed}" for s in specs for seed in seeds]
    if train and not all(rundir.is_done(where / n) for n in names):
        branches(parent, step, where, specs, seeds)  # made ones are resumed, not remade
    return {n: Run.open(where / n) for n in names if rundir.is_done(where / n)}


def _tau_row(run: Run, parent_tau: int, budget: int) -> dict:
    tau = run.tau()
    return {
        "tau": tau,
        "escaped": tau is not None,
        "shift": None if tau is None else tau - parent_tau,
        "final_step": run.metric_rows()[-1]["step"],
        "budget": budget,
    }


def necessity_table(parent: Run, out, seeds=(1, 2, 3), train: bool = True) -> list[dict]:
    """From `parent`'s kept states nearest 0.25 τ and 0.75 τ: branches that freeze, and that
    mean-ablate, the routing head (`find_routing_head`); controls: the same for the least-used
    layer-0 head, and no change; each over `seeds` (the batch order's). One row per branch:
    its τ, its shift from the parent's, and whether it escaped within 3 x the parent's τ."""
    from selector_lens.analysis.ablation import head_label
    from selector_lens.analysis.routing import find_routing_head

    tau = parent.require_tau("no τ to branch around")
    routing_head = find_routing_head(parent, sufficiency=False)["routing_head"]
    routing = head_label(*routing_head)
    budget = BUDGET_OVER_TAU * tau
    rows, done = [], set()
    for frac in NECESSITY_FRACTIONS:
        step = nearest_state(parent, frac * tau, Path(out))
        if step in done:  # a published parent keeps no states: the nearest branched one
            continue  # stands in, and one that already answered an earlier fraction is not its
        done.add(step)
        control = head_label(*least_used_head(parent, step, routing_head))
        kinds = {"no change": Changes(options={"steps": budget})}
        for role, head in (("routing", routing), ("control", control)):
            kinds[f"freeze {role}"] = Changes(options={"steps": budget}, freeze_heads=(head,))
            kinds[f"ablate {role}"] = Changes(options={"steps": budget}, ablate_heads=(head,))
        found = _trained(parent, step, Path(out), list(kinds.values()), seeds, train)
        for kind, spec in kinds.items():
            for seed in seeds:
                run = found.get(f"{spec.label}-s{seed}")
                if run is None:
                    continue
                rows.append(
                    {
                        "fraction": frac,
                        "step": step,
                        "change": kind,
                        "head": routing
                        if "routing" in kind
                        else control
                        if "control" in kind
                        else None,
                        "seed": seed,
                        "run": run.path.name,
                        **_tau_row(run, tau, budget),
                    }
                )
    return rows


def noise_table(parent: Run, out, seeds=(1, 2, 3), train: bool = True) -> list[dict]:
    """From `parent`'s kept state nearest 0.5 τ: lr x0.25, x0.5, x2, x4 and batch x4 (and no
    change), over `seeds`. One row per branch: the noise scale η / B, the remaining waiting time
    (its τ minus the branch step; None if it never escaped within 3 x the parent's τ) and the
    distance it travelled meanwhile (remaining x lr_x, the lr over the parent's)."""
    tau = parent.require_tau("no τ to branch around")
    cfg, budget = parent.config, BUDGET_OVER_TAU * tau
    step = nearest_state(parent, NOISE_FRACTION * tau, Path(out))
    kinds = {"no change": (1, 1), **NOISE_CHANGES}
    specs = {
        kind: Changes(options={"lr": cfg.lr * a, "batch_size": cfg.batch_size * b, "steps": budget})
        for kind, (a, b) in kinds.items()
    }
    found = _trained(parent, step, Path(out), list(specs.values()), seeds, train)
    rows = []
    for kind, spec in specs.items():
        a, b = kinds[kind]
        for seed in seeds:
            run = found.get(f"{spec.label}-s{seed}")
            if run is None:
                continue
            row = _tau_row(run, tau, budget)
            rows.append(
                {
                    "step": step,
                    "change": kind,
                    "noise_scale": cfg.lr * a / (cfg.batch_size * b),
                    "lr_x": a,
                    "batch_x": b,
                    "seed": seed,
                    "run": run.path.name,
                    "remaining": None if row["tau"] is None else row["tau"] - step,
                    "examples": None
                    if row["tau"] is None
                    else (row["tau"] - step) * cfg.batch_size * b,
                    "distance": None if row["tau"] is None else (row["tau"] - step) * a,
                    **row,
                }
            )
    return rows


NOISE_RECORDS = ("drift", "clip", "update_norm", "mean_grad_norm", "noise_norm", "staleness")


def _noise_records(run: Run, start: int, end: int) -> dict:
    """A noise-scaled branch's records (`training.noise`) averaged over its evaluations in
    (start, end]: `drift` (the update's component down ḡ per step), `clip` (the share of steps
    where clipping bound), the update's norm, |ḡ|, the noise's norm |g_B - ḡ|, and `staleness`
    (how far ḡ moved between two estimates, over its norm)."""
    rows = [r for r in run.metric_rows() if start < r["step"] <= end and "noise_clip" in r]
    keys = {"drift": "noise_update_along_mean", "clip": "noise_clip"}
    out = {}
    for name in NOISE_RECORDS:
        values = [r[keys.get(name, f"noise_{name}")] for r in rows]
        values = [v for v in values if v is not None]
        out[name] = float(np.mean(values)) if values else None
    return out


def noise_only_table(parent: Run, out, seeds=(1, 2, 3), train: bool = True) -> list[dict]:
    """From `parent`'s kept state nearest 0.5 τ: one branch per noise scale C in NOISE_SCALES
    (the same lr, batch and examples; `training.noise`), over `seeds`. One row per branch: its
    wait in steps (τ minus the branch step; None if it never escaped within 3 x the parent's τ),
    the examples it saw meanwhile (the same for every C at one seed: the batch order is the
    parent's), and its records before τ (`_noise_records`)."""
    tau = parent.require_tau("no τ to branch around")
    budget = BUDGET_OVER_TAU * tau
    step = nearest_state(parent, NOISE_FRACTION * tau, Path(out))
    specs = noise_only_specs(budget)
    found = _trained(parent, step, Path(out), specs, seeds, train)
    rows = []
    for spec in specs:
        for seed in seeds:
            run = found.get(f"{spec.label}-s{seed}")
            if run is None:
                continue
            row = _tau_row(run, tau, budget)
            remaining = None if row["tau"] is None else row["tau"] - step
            end = row["tau"] if row["tau"] is not None else row["final_step"]
            rows.append(
                {
                    "step": step,
                    "noise_scale": spec.noise_scale,
                    "change": f"C = {spec.noise_scale:g}",
                    "seed": seed,
                    "run": run.path.name,
                    "remaining": remaining,
                    "examples": None if remaining is None else remaining * run.config.batch_size,
                    "eval_every": run.config.eval_every,
                    **row,
                    **_noise_records(run, step, end),
                }
            )
    return rows


def from_step_0(parent: Run, runs: list[Run]) -> dict[str, dict]:
    """Per noise branch kind, the run among `runs` (claim 4's lr and batch sweeps) that trained
    with the branch's lr and batch size from step 0 (the parent's task, seed and schedule
    otherwise): its name and τ. Kinds with no such run (lr x0.25 and x4 at the paper's scale)
    are left out."""
    cfg = parent.config
    same = ("k", "n_bases", "direction", "seed", "schedule")
    out = {}
    for kind, (a, b) in {"no change": (1, 1), **NOISE_CHANGES}.items():
        for run in runs:
            o, p = run.config.options(), cfg.options()
            if all(o[f] == p[f] for f in same) and (o["lr"], o["batch_size"]) == (
                cfg.lr * a,
                cfg.batch_size * b,
            ):
                out[kind] = {"run": run.path.name, "tau": run.tau()}
                break
    return out


def summary(rows: list[dict], by: tuple = ("step", "change")) -> list[dict]:
    """Per branch kind: mean shift (or remaining time, and its distance and examples) over seeds
    with its range, how many seeds escaped, and the mean of a noise branch's records (the most
    clipping of its seeds beside)."""
    out = {}
    for r in rows:
        out.setdefault(tuple(r[k] for k in by), []).append(r)
    table = []
    for key, group in out.items():
        value = "remaining" if "remaining" in group[0] else "shift"
        done = [r[value] for r in group if r[value] is not None]
        far = [r["distance"] for r in group if r.get("distance") is not None]
        table.append(
            {
                **dict(zip(by, key)),
                "seeds": len(group),
                "escaped": sum(r["escaped"] for r in group),
                value: float(np.mean(done)) if done else None,
                f"{value}_range": [min(done), max(done)] if done else None,
                **({"noise_scale": group[0]["noise_scale"]} if "noise_scale" in group[0] else {}),
                **({"distance": float(np.mean(far))} if far else {}),
                **_means(group, ("examples", *NOISE_RECORDS)),
                **({"clip_max": max(r["clip"] or 0 for r in group)} if "clip" in group[0] else {}),
            }
        )
    return table


def _means(group: list[dict], keys) -> dict:
    """The mean over `group` of each key its rows hold a number for."""
    out = {}
    for key in keys:
        values = [r[key] for r in group if r.get(key) is not None]
        if values:
            out[key] = float(np.mean(values))
    return out


# --- the report's rows ------------------------------------------------------------------------
NECESSITY_CLAIM = (
    "Internal cascade, by intervention: is the routing head necessary?",
    "the routing head assembles during the plateau, before the drop (it precedes the escape; "
    "whether the escape needs it, a branch that freezes or ablates it answers)",
)
NOISE_CLAIM = (
    "Entropic stabilisation, by intervention: does noise hold the plateau?",
    "gradient noise stabilises the marginal solution: more noise (η / B) slows the escape",
)


def interventions(setup) -> Study:
    """Both branching studies: from each parent's kept states (the parents trained first, the
    branches made and trained when training), their tables, figures and two report rows. Claim
    4's row is decided by the noise-only branches of the K = 20 parent (`verdicts.noise_only`);
    the lr / batch branches are read beside it, in steps and in examples (`noise_holds`)."""
    from selector_lens.paper.presets import INTERVENTION_SEEDS
    from selector_lens.viz import study_figures

    seeds = INTERVENTION_SEEDS[setup.scale]
    parents = {part: setup.runs(f"interventions/{part}") for part in ("necessity", "noise")}
    out = setup.root / "branches"
    result, claims, figs = {"seeds": list(seeds)}, [], []
    for part, table in (("necessity", necessity_table), ("noise", noise_table)):
        parent = parents[part][0] if parents[part] and parents[part][0].tau() else None
        if parent is None or (not setup.train and not (out / parent.path.name).is_dir()):
            continue
        rows = table(parent, out / parent.path.name, seeds, train=setup.train)
        by = ("step", "change") if part == "necessity" else ("change",)
        summary_rows = summary(rows, by)
        if part == "noise":  # beside each branch, the same change made from step 0 (claim 4)
            sweeps = setup.runs("noise/lr") + setup.runs("noise/batch_size")
            start = from_step_0(parent, sweeps)
            for r in summary_rows:
                r["from_step_0"] = start.get(r["change"])
        result[part] = {"parent": parent.path.name, "parent_tau": parent.tau(), "rows": rows}
        result[part]["summary"] = summary_rows
        figs.append(study_figures.branch_times(summary_rows, part, parent.tau()))
    result["noise_only"] = {}
    for part in ("noise", "necessity"):  # K = 20 decides; K = 10 is read beside it
        parent = parents[part][0] if parents[part] and parents[part][0].tau() else None
        if parent is None or not (setup.train or _noise_only_branched(parent, out)):
            continue
        rows = noise_only_table(parent, out / parent.path.name, seeds, train=setup.train)
        if rows:
            result["noise_only"][parent.path.name] = {
                "parent_tau": parent.tau(),
                "rows": rows,
                "summary": summary(rows, ("noise_scale",)),
                "verdict": verdicts.noise_only(rows),
            }
    claims.append(_necessity_claim(result, parents["necessity"]))
    claims.append(_noise_claim(result, parents["noise"]))
    for name, study in result["noise_only"].items():
        figs.append(study_figures.noise_only_times(study["summary"], name, study["parent_tau"]))
    _save(setup.dir("interventions"), "interventions", result)
    return Study("interventions", result, figs, claims)


def _noise_only_branched(parent: Run, out: Path) -> bool:
    """Has any noise-only branch of `parent` been made under `out`?"""
    where = out / parent.path.name
    return where.is_dir() and any(where.glob("step*/*noise*"))


def _parent_missing(parents: list[Run]) -> str:
    return "the parent run has not finished" if not parents else "no τ"


def _necessity_claim(result: dict, parents: list[Run]) -> Claim:
    title, paper = NECESSITY_CLAIM
    if "necessity" not in result:
        why = _parent_missing(parents) if not parents or not parents[0].tau() else None
        why = why or f"no branch of {parents[0].path.name} has finished yet"
        return Claim(7, title, paper, why, verdicts.NO_RESULT, "-")
    study = result["necessity"]
    return Claim(
        7,
        title,
        paper,
        _sentence(study["summary"], "necessity", study["parent_tau"]),
        verdicts.necessity(study["rows"]),
        f"parent {study['parent']} (τ {study['parent_tau']}); branches over batch-order seeds "
        f"{result['seeds']}, each to at most {BUDGET_OVER_TAU} x the parent's τ",
    )


def _noise_claim(result: dict, parents: list[Run]) -> Claim:
    """Claim 4 by intervention: decided by the K = 20 parent's noise-only branches, in steps;
    the lr / batch branches beside them, in steps and in examples."""
    title, paper = NOISE_CLAIM
    parent = parents[0].path.name if parents else None
    decides = result["noise_only"].get(parent)
    said = []
    if decides:
        said.append(_noise_only_sentence(parent, decides))
    for name, study in result["noise_only"].items():
        if name != parent:
            said.append(f"beside it, {_noise_only_sentence(name, study)}")
    old = result.get("noise")
    if old:
        steps, examples = (verdicts.noise_holds(old["rows"], u) for u in verdicts.UNITS)
        said.append(
            f"the lr / batch branches (which change the pace or the sample as well), read in "
            f"steps: {steps}; in examples: {examples}; "
            + _sentence(old["summary"], "noise", old["parent_tau"])
        )
    if not said:
        why = _parent_missing(parents) if not parents or not parents[0].tau() else None
        why = why or f"no branch of {parent} has finished yet"
        return Claim(4, title, paper, why, verdicts.NO_RESULT, "-")
    verdict = decides["verdict"] if decides else verdicts.NO_RESULT
    if not decides:
        said.insert(0, f"no noise-only branch of {parent} has finished yet (it decides)")
    return Claim(
        4,
        title,
        paper,
        "; ".join(said),
        verdict,
        f"branches of {parent} (τ {parents[0].tau()}) at 0.5 τ that scale the minibatch "
        f"gradient's noise by C (g = ḡ + C (g_B - ḡ), ḡ from {REFERENCE_X} x the batch every "
        f"{REFRESH_EVERY} steps; the same lr, batch and examples), over batch-order seeds "
        f"{result['seeds']}, each to at most {BUDGET_OVER_TAU} x the parent's τ; "
        "verdicts.noise_only (fixed before its data)",
    )


def _noise_only_sentence(name: str, study: dict) -> str:
    def one(r):
        mean = "-" if r["remaining"] is None else f"{r['remaining']:.0f}"
        spread = r["remaining_range"]
        rng = f" [{spread[0]:.0f}, {spread[1]:.0f}]" if spread else ""
        drift = f", {r['drift']:.2e} down ḡ a step" if r.get("drift") is not None else ""
        clip = (
            f", clipping bound in {r['clip_max']:.0%} of steps at most" if "clip_max" in r else ""
        )
        return f"C = {r['noise_scale']:g}: {mean}{rng} ({r['escaped']}/{r['seeds']} escaped{drift}{clip})"

    return (
        f"noise-only branches of {name} (τ {study['parent_tau']}), steps left to τ, mean [range] "
        f"over seeds: " + "; ".join(one(r) for r in study["summary"]) + f": {study['verdict']}"
    )


def _sentence(rows: list[dict], part: str, tau: int) -> str:
    value, spec = ("shift", "+.0f") if part == "necessity" else ("remaining", ".0f")

    def one(r):
        where = f"at step {r['step']} " if "step" in r else ""
        mean = "-" if r[value] is None else format(r[value], spec)
        spread = r[f"{value}_range"]
        rng = f" [{format(spread[0], spec)}, {format(spread[1], spec)}]" if spread else ""
        far = f", distance {r['distance']:.0f}" if r.get("distance") is not None else ""
        return f"{where}{r['change']}: {mean}{rng}{far} ({r['escaped']}/{r['seeds']} escaped)"

    what = (
        "τ shift from the parent's"
        if part == "necessity"
        else "steps left to τ after the branch, and the distance travelled meanwhile (steps x the "
        "lr over the parent's)"
    )
    said = f"{what} (parent τ {tau}), mean [range] over seeds: " + "; ".join(one(r) for r in rows)
    start = [r for r in rows if r.get("from_step_0")]
    if start:
        said += "; the same change from step 0 (claim 4's runs), τ: " + ", ".join(
            f"{r['change']} {r['from_step_0']['tau'] or 'never'}" for r in start
        )
    return said
