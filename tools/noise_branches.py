"""Train the K = 20 noise study's branches (claim 4 by intervention) a few seeds at a time, in
a workspace that holds only the published results.

    OMP_NUM_THREADS=1 python tools/noise_branches.py --seeds 2 --part batch128
    OMP_NUM_THREADS=1 python tools/noise_branches.py --seeds 2 --part batch512   # beside it
    OMP_NUM_THREADS=1 python tools/noise_branches.py --seeds 1 --part noise-only  # C = 0 .. 4
    OMP_NUM_THREADS=1 python tools/noise_branches.py --seeds 1 --part noise-only --parent necessity

The study branches its parent at the kept state nearest 0.5 τ. A fresh workspace has no states:
the parent is trained again up to that step (one thread, about 5 minutes; into
ROOT/branch-points/, so `publish` never takes it for the finished parent) and its evaluations
are checked against the published parent's, so every seed's branches start from the same
trajectory up to rounding (another CPU's kernels); a parent that differs beyond it (another
step's arithmetic) is refused. Each seed's branches of one batch size train as one batched model;
a seed of 5 branches at batch 128 is ~2 h of one thread, its batch-512 branch ~1.5 h; the
noise-only branches (issue 44) cost ~4.75x a step each (ḡ from 16 x the batch every 4 steps). Publish
what finished with `selector-lens publish`: the finished branches of a rebuilt branch point
are pointed at the study's parent (ROOT/runs/NAME) first, which the published copy has.
"""

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

import selector_lens as sl
from selector_lens.config import from_options
from selector_lens.files import read_json, write_json
from selector_lens.paper.presets import study_runs
from selector_lens.paper.studies.interventions import (
    BUDGET_OVER_TAU,
    NOISE_CHANGES,
    NOISE_FRACTION,
    nearest_state,
    noise_only_specs,
)
from selector_lens.runs import rundir
from selector_lens.runs.rundir import CLOCK
from selector_lens.training.branch import Changes, branches, make_branch
from selector_lens.training.trainer import train_many

ROUNDING = 1e-5


def close(ours, theirs) -> bool:
    """Equal, numbers to within ROUNDING, lists and dicts element by element."""
    if isinstance(ours, float) or isinstance(theirs, float):
        return isinstance(theirs, (int, float)) and abs(ours - theirs) <= ROUNDING
    if isinstance(ours, list) and isinstance(theirs, list):
        return len(ours) == len(theirs) and all(map(close, ours, theirs))
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return ours.keys() == theirs.keys() and all(close(ours[k], theirs[k]) for k in ours)
    return ours == theirs


def same_trajectory(ours: sl.Run, published: sl.Run, upto: int) -> bool:
    """Both runs logged the same evaluations (wall clock aside) up to step `upto`, each number
    within ROUNDING: another CPU's GEMM kernels (AVX-512 without AMX, say) round differently by
    ~1e-7, while a changed step (the EOS input dropped) drifts by 1e-2."""

    def rows(run):
        return {
            r["step"]: {k: v for k, v in r.items() if k not in CLOCK}
            for r in run.metric_rows()
            if r["step"] <= upto
        }

    return close(rows(ours), rows(published))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", required=True)
    p.add_argument("--part", choices=("batch128", "batch512", "noise-only"), required=True)
    p.add_argument(
        "--parent",
        choices=("noise", "necessity"),
        default="noise",
        help="the study whose parent is branched: noise (K = 20), necessity (K = 10)",
    )
    p.add_argument("--root", type=Path, default=Path("checkpoints/reproduce/paper"))
    p.add_argument("--published", type=Path, default=Path("analyses/results/paper"))
    a = p.parse_args()
    ((name, options),) = study_runs("paper")[f"interventions/{a.parent}"].items()
    published = sl.Run.open(a.published / "runs" / name)
    tau = published.require_tau("the published parent has no τ")
    out = a.root / "branches" / name
    every = options["state_every"]
    step = every * round(NOISE_FRACTION * tau / every)  # K = 20: 2,200 (0.49 τ); K = 10: 750
    if a.part != "noise-only" and out.is_dir():  # the lr / batch study's own branch point
        step = nearest_state(published, NOISE_FRACTION * tau, out)
    if a.part == "noise-only":
        return noise_only(a, name, options, published, step, BUDGET_OVER_TAU * tau)
    if a.parent != "noise":
        print("the lr / batch branches are the K = 20 parent's (--parent noise)", file=sys.stderr)
        return 2
    where, kept = branch_point(a.root, name, options, step)
    parent = sl.Run.open(where)
    if not same_trajectory(parent, published, step):
        print(f"{where} differs from {published.path} by step {step}: refused", file=sys.stderr)
        return 2
    cfg = parent.config
    specs = [
        Changes(
            options={
                "lr": cfg.lr * lr_x,
                "batch_size": cfg.batch_size * batch_x,
                "steps": BUDGET_OVER_TAU * tau,
            }
        )
        for lr_x, batch_x in {"no change": (1, 1), **NOISE_CHANGES}.values()
        if (batch_x == 1) == (a.part == "batch128")
    ]
    for seed in a.seeds:
        print(f"{a.part}, seed {seed}: {', '.join(s.label for s in specs)}", flush=True)
        branches(parent, step, out / f"step{step}", specs, seeds=(seed,))
    if where != kept[0]:
        relink(out / f"step{step}", where, kept[0])
    return 0


def branch_point(root: Path, name: str, options: dict, step: int) -> tuple[Path, list[Path]]:
    """The study's own parent where it was trained here with a state at `step`; else one trained
    to the branch point, kept out of runs/ (`publish` would take it for the finished parent)."""
    kept = [root / d / name for d in ("runs", "branch-points")]
    where = next((w for w in kept if rundir.is_run(w) and step in sl.Run.open(w).state_steps), None)
    if where is None:
        where = kept[1]
        sl.train(from_options({**options, "steps": step}), out=where, resume=True)
    return where, kept


def divergence(ours: sl.Run, published: sl.Run, upto: int) -> tuple[float, int | None]:
    """The largest difference between the two logs' numbers up to `upto`, and the first step
    where one exceeds ROUNDING."""
    theirs = {r["step"]: r for r in published.metric_rows()}
    worst, first = 0.0, None
    for r in ours.metric_rows():
        o = theirs.get(r["step"])
        if r["step"] > upto or o is None:
            continue
        diffs = [abs(v - o[k]) for k, v in r.items() if isinstance(v, float) and k not in CLOCK]
        d = max((x for x in diffs if x == x), default=0.0)
        worst = max(worst, d)
        first = first if first is not None or d <= ROUNDING else r["step"]
    return worst, first


def noise_only(a, name: str, options: dict, published: sl.Run, step: int, budget: int) -> int:
    """The noise-only study's branches (issue 44): every seed's branches are made first, from
    one branch point, so that a later session (another CPU, whose rebuilt parent would follow
    another trajectory: on an AMD EPYC the K = 20 parent left the published one at step 600,
    0.047 nats apart by step 2,200) trains them on from the same state; `tools/inflight.py`
    carries the unfinished ones. The branch point's trajectory is the branches' own log up to
    `step`; publish it beside them (`publish` copies ROOT/branch-points/)."""
    specs = noise_only_specs(budget)
    where_b = a.root / "branches" / name / f"step{step}"
    runs = [(spec, seed, where_b / f"{spec.label}-s{seed}") for seed in a.seeds for spec in specs]
    # a branch that finished and was published is made (a new session has only what was in
    # flight: remaking it would need the branch point again, on this CPU another trajectory)
    done = a.published / where_b.relative_to(a.root)
    runs = [r for r in runs if not rundir.is_done(done / r[2].name)]
    missing = [r for r in runs if not rundir.is_run(r[2])]
    if missing:
        where, _ = branch_point(a.root, name, options, step)
        parent = sl.Run.open(where)
        worst, first = divergence(parent, published, step)
        print(
            f"branch point {where} at step {step}: its log against the published parent's, "
            f"largest difference {worst:.2e}"
            + (f" (beyond {ROUNDING} from step {first})" if first else ""),
            flush=True,
        )
        for spec, seed, path in missing:
            make_branch(parent, step, path, replace(spec, options={**spec.options, "seed": seed}))
    for seed in a.seeds:
        mine = [path for _, s, path in runs if s == seed]
        if mine:
            print(f"noise-only, seed {seed}: {', '.join(p.name for p in mine)}", flush=True)
            train_many([sl.Run.open(p).config for p in mine], mine, resume=True)
    return 0


def relink(branched: Path, rebuilt: Path, parent: Path) -> None:
    """Point the finished branches of the rebuilt branch point at the study's parent, whose
    trajectory it was checked to be: published, they then hang under the published parent
    (its dashboard overlays them, `Run.lineage` walks to it)."""
    parent.parent.mkdir(parents=True, exist_ok=True)  # `publish` reads ROOT/runs/, if empty
    for info in branched.glob(f"*/{rundir.RUN_JSON}"):
        record = read_json(info)
        branch = record.get(rundir.BRANCH) or {}
        if (
            rundir.is_done(info.parent)
            and (info.parent / branch.get("parent", "")).resolve() == rebuilt.resolve()
        ):
            branch["parent"] = os.path.relpath(parent.resolve(), info.parent.resolve())
            write_json(info, record)


if __name__ == "__main__":
    sys.exit(main())
