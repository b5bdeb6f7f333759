"""Publish the stages of development of trained runs into analyses/results/stages/ (issue 45):
for each run, the LLC at evenly spaced checkpoints, attribution patching of every head's output at
every checkpoint, and its comparison with exact patching; then the run's published form (its store
holds these and what `analyze` stores, so its dashboard needs no checkpoint), summary.json and
llc-<run>.svg.

    OMP_NUM_THREADS=1 python tools/publish_stages.py checkpoints/stages/k10-nb1000-s42 \
        checkpoints/tasks/induction --llc-points 27 --lr 1e-5

Each run's tables are stored as they are computed, so a killed publish resumes where it stopped.
"""

import argparse
import json
from dataclasses import asdict
from pathlib import Path

import selector_lens as sl
from selector_lens.analysis.attribution import attribution_series, compare
from selector_lens.analysis.llc import LLCSettings, llc
from selector_lens.analysis.tables import analyze
from selector_lens.paper.publish import publish_run
from selector_lens.runs.steps import thin
from selector_lens.viz.static import lines_svg

DEST = Path("analyses/results/stages")
RESULTS = DEST.parent


def published_path(run) -> Path:
    """Where the run's published form goes: beside its task's published runs if it is one of
    them (analyses/results/tasks/<task>/runs/<name>: its store gains the stages), else
    stages/runs/<name>."""
    there = RESULTS / "tasks" / run.config.task.name / "runs" / run.path.name
    return there if there.is_dir() else DEST / "runs" / run.path.name


def stages(run, settings: LLCSettings, points: int, compared: int) -> dict:
    """The LLC at `points` checkpoints, attribution at every one, exact patching at `compared`."""
    table = llc(run, thin(run.steps, points), settings)
    attribution_series(run, "z", run.steps)
    vs = compare(run, thin(run.steps, compared))
    return {
        "run": run.path.name,
        "task": run.config.task.name,
        "tau": run.tau(),
        "steps": [int(s) for s in table.step],
        "llc_mean": [round(float(x), 3) for x in table.llc],
        "llc_std": [round(float(x), 3) for x in table.llc_std],
        "llc_drift": [round(float(x), 3) for x in table.drift],
        "llc_flags": [f or "" for f in table["flags"]],
        "llc_seconds_per_checkpoint": round(float(table.seconds.mean()), 1),
        "llc_seconds": round(float(table.seconds.sum()), 1),  # as computed (stored)
        "llc_settings": {
            **asdict(settings),
            "lr": float(table.lr.iloc[0]),  # the step used (the default: 0.1 / n beta)
            "n_beta": float(table.n_beta.iloc[0]),
        },
        "attribution_vs_exact_r": round(vs["correlation"], 4),
        "attribution_vs_exact_per_step": [
            {k: (round(v, 4) if isinstance(v, float) else v) for k, v in x.items()}
            for x in vs["per_step"]
        ],
        "attribution_seconds": round(vs["seconds_attribution"], 2),
        "exact_seconds": round(vs["seconds_exact"], 2),
        "compared_checkpoints": len(vs["per_step"]),
    }


def figure(summary: dict) -> str:
    """The LLC against step, τ marked (the loss beside it is in the dashboard's stages panel);
    a negative estimate (the initialisation: not a minimum) is left off the axis, and named."""
    kept = [(s, v) for s, v in zip(summary["steps"], summary["llc_mean"]) if v >= 0]
    left = [s for s, v in zip(summary["steps"], summary["llc_mean"]) if v < 0]
    title = f"The local learning coefficient across training: {summary['run']}"
    if left:
        title += f" (negative, not shown: step {', '.join(map(str, left))})"
    return lines_svg(
        [("LLC (mean over chains)", [s for s, _ in kept], [v for _, v in kept])],
        title,
        "step",
        "LLC",
        (summary["tau"], f"τ = {summary['tau']}") if summary["tau"] is not None else None,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--llc-points", type=int, default=27)
    ap.add_argument("--compared", type=int, default=14, help="checkpoints patched exactly")
    ap.add_argument("--lr", type=float, default=LLCSettings.lr)
    ap.add_argument("--chains", type=int, default=LLCSettings.chains)
    ap.add_argument("--draws", type=int, default=LLCSettings.draws)
    ap.add_argument("--burn-in", type=int, default=LLCSettings.burn_in)
    ap.add_argument("--batch-size", type=int, default=LLCSettings.batch_size)
    args = ap.parse_args()
    settings = LLCSettings(
        lr=args.lr,
        chains=args.chains,
        draws=args.draws,
        burn_in=args.burn_in,
        batch_size=args.batch_size,
    )
    path = DEST / "summary.json"
    summary = json.loads(path.read_text()) if path.exists() else {"runs": []}
    for run_path in args.runs:
        run = sl.Run.open(run_path)
        one = stages(run, settings, args.llc_points, args.compared)
        analyze(run)  # the rest of the dashboard, stored with it
        where = published_path(run)
        publish_run(run, where)
        one["path"] = str(where.relative_to(RESULTS))
        summary["runs"] = [r for r in summary["runs"] if r["run"] != one["run"]] + [one]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary, indent=1) + "\n")
        (DEST / f"llc-{one['run']}.svg").write_text(figure(one))
        print(json.dumps({k: v for k, v in one.items() if "per_step" not in k}))


if __name__ == "__main__":
    main()
