"""Train the K = 20 noise study's branches (claim 4 by intervention) a few seeds at a time, in
a workspace that holds only the published results.

    OMP_NUM_THREADS=1 python tools/noise_branches.py --seeds 2 --part batch128
    OMP_NUM_THREADS=1 python tools/noise_branches.py --seeds 2 --part batch512   # beside it

The study branches its parent at the kept state nearest 0.5 τ. A fresh workspace has no states:
the parent is trained again up to that step (one thread, about 5 minutes; into
ROOT/branch-points/, so `publish` never takes it for the finished parent) and its evaluations
are checked against the published parent's, so every seed's branches start from the same
trajectory; a parent that differs (another step's rounding) is refused. Each seed's branches of
one batch size train as one batched model; a seed of 5 branches at batch 128 is ~2 h of one
thread, its batch-512 branch ~1.5 h. Publish what finished with `selector-lens publish`.
"""

import argparse
import sys
from pathlib import Path

import selector_lens as sl
from selector_lens.config import from_options
from selector_lens.paper.presets import study_runs
from selector_lens.paper.studies.interventions import (
    BUDGET_OVER_TAU,
    NOISE_CHANGES,
    NOISE_FRACTION,
    nearest_state,
)
from selector_lens.runs import rundir
from selector_lens.training.branch import Changes, branches


def same_trajectory(ours: sl.Run, published: sl.Run, upto: int) -> bool:
    """Both runs logged the same evaluations (wall clock aside) up to step `upto`."""

    def rows(run):
        return [
            {k: v for k, v in r.items() if k != "wall_s"}
            for r in run.metric_rows()
            if r["step"] <= upto
        ]

    return rows(ours) == rows(published)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", required=True)
    p.add_argument("--part", choices=("batch128", "batch512"), required=True)
    p.add_argument("--root", type=Path, default=Path("checkpoints/reproduce/paper"))
    p.add_argument("--published", type=Path, default=Path("analyses/results/paper"))
    a = p.parse_args()
    ((name, options),) = study_runs("paper")["interventions/noise"].items()
    published = sl.Run.open(a.published / "runs" / name)
    tau = published.require_tau("the published parent has no τ")
    out = a.root / "branches" / name
    step = nearest_state(published, NOISE_FRACTION * tau, out) if out.is_dir() else None
    every = options["state_every"]
    step = step or every * round(NOISE_FRACTION * tau / every)
    # the study's own parent where it was trained here; else one trained to the branch point,
    # kept out of runs/ (`publish` would take it for the finished parent)
    kept = [a.root / d / name for d in ("runs", "branch-points")]
    where = next((w for w in kept if rundir.is_run(w) and step in sl.Run.open(w).state_steps), None)
    if where is None:
        where = kept[1]
        sl.train(from_options({**options, "steps": step}), out=where, resume=True)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
