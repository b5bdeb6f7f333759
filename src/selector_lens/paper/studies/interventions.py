"""Interventions on the dynamics (branches of a run with kept training states): is the routing
head necessary for the escape, and does gradient noise hold the plateau?

Each table is built from the branches' own logs, so it rebuilds from published runs; with
`train=True` the missing branches are made and trained first (`training.branch.branches`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from selector_lens.errors import SelectorLensError
from selector_lens.paper.studies.base import Claim, Study, _save
from selector_lens.runs import rundir
from selector_lens.runs.run import Run
from selector_lens.training.branch import Changes, branches

NECESSITY_FRACTIONS = (0.25, 0.75)  # branch points, in units of the parent's τ
NOISE_FRACTION = 0.5
NOISE_CHANGES = {"lr x0.25": (0.25, 1), "lr x0.5": (0.5, 1), "lr x2": (2, 1), "lr x4": (4, 1)}
NOISE_CHANGES["batch x4"] = (1, 4)  # (lr factor, batch factor)
BUDGET_OVER_TAU = 3  # a branch that has not escaped by 3 x the parent's τ "never" does


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
    """Per branch kind: mean shift (or remaining time, and its distance) over seeds with its
    range, and how many seeds escaped."""
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
            }
        )
    return table


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
    branches made and trained when training), their tables, figure and two report rows."""
    from selector_lens.paper import verdicts
    from selector_lens.paper.presets import INTERVENTION_SEEDS
    from selector_lens.viz import study_figures

    seeds = INTERVENTION_SEEDS[setup.scale]
    parents = {part: setup.runs(f"interventions/{part}") for part in ("necessity", "noise")}
    out = setup.root / "branches"
    result, claims, figs = {"seeds": list(seeds)}, [], []
    for part, table, rule, (title, paper) in (
        ("necessity", necessity_table, verdicts.necessity, NECESSITY_CLAIM),
        ("noise", noise_table, verdicts.noise_holds, NOISE_CLAIM),
    ):
        number = 7 if part == "necessity" else 4
        if not parents[part] or not parents[part][0].tau():
            why = "the parent run has not finished" if not parents[part] else "no τ"
            claims.append(Claim(number, title, paper, why, verdicts.NO_RESULT, "-"))
            continue
        parent = parents[part][0]
        if not setup.train and not (out / parent.path.name).is_dir():
            why = f"no branch of {parent.path.name} has finished yet"
            claims.append(Claim(number, title, paper, why, verdicts.NO_RESULT, "-"))
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
        claims.append(
            Claim(
                number,
                title,
                paper,
                _sentence(summary_rows, part, parent.tau()),
                rule(rows),
                f"parent {parent.path.name} (τ {parent.tau()}); branches over batch-order seeds "
                f"{list(seeds)}, each to at most {BUDGET_OVER_TAU} x the parent's τ",
            )
        )
    _save(setup.dir("interventions"), "interventions", result)
    return Study("interventions", result, figs, claims)


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
