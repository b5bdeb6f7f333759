"""Publish the other tasks' runs into analyses/results/tasks/<task>/: each run's published form
(its analyses computed and stored first, so nothing needs a checkpoint), the dashboard drawn from
the published copy, and summary.json computed from it (a test recomputes it).

    OMP_NUM_THREADS=1 python tools/publish_tasks.py modular checkpoints/tasks/grok
    OMP_NUM_THREADS=1 python tools/publish_tasks.py induction checkpoints/tasks/induction \
        [checkpoints/tasks/induction-mlp ...]

The first run named is the one summary.json and dashboard.html describe; the others are
published beside it (`selector-lens dashboard --run` draws theirs from the published copy).
"""

import argparse
import json
from pathlib import Path

import selector_lens as sl
from selector_lens.analysis.tables import analyze, task_result
from selector_lens.paper.publish import publish_run
from selector_lens.viz.dashboard import run_dashboard
from selector_lens.viz.static import lines_svg

DEST = Path("analyses/results/tasks")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task", choices=["modular", "induction"])
    ap.add_argument("runs", nargs="+", type=Path)
    args = ap.parse_args()
    dest = DEST / args.task
    for i, path in enumerate(args.runs):
        run = sl.Run.open(path)
        name = path.name
        seconds = analyze(run)
        print(
            f"{name}: analyses stored in " + ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items())
        )
        publish_run(run, dest / "runs" / name)
        published = sl.Run.open(dest / "runs" / name)
        if i == 0:  # one dashboard a task (~7 MB: plotly.js and the explorer's patterns)
            page = run_dashboard(published, dest / "dashboard.html")
            print(f"{name}: dashboard {page} ({page.stat().st_size / 1e6:.1f} MB)")
            summary = {"run": name, **task_result(published)}
            (dest / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
            print(json.dumps(summary, indent=1))
            (dest / "transition.svg").write_text(figure(args.task, published, summary))


def figure(task: str, run, summary: dict) -> str:
    """The README's figure of the task's transition, from the published rows."""
    rows = run.metric_rows()
    steps = [r["step"] for r in rows]
    if task == "induction":
        return lines_svg(
            [
                ("repeat loss (in-context)", steps, [r["repeat_loss"] for r in rows]),
                ("other loss (random tokens)", steps, [r["other_loss"] for r in rows]),
            ],
            "Induction heads: the phase change (2-layer attention-only, shortformer)",
            "step",
            "loss (nats)",
            (summary["phase_change_step"], f"phase change, step {summary['phase_change_step']}"),
        )
    return lines_svg(
        [
            ("train accuracy", steps, [r["train_acc"] for r in rows]),
            ("test accuracy", steps, [r["test_acc"] for r in rows]),
            ("Fourier share (top 5)", steps, [r["fourier_share"] for r in rows]),
        ],
        f"Grokking: a + b mod {summary['p']}",
        "step",
        "share",
        (summary["test_solved_step"], f"test acc >= 0.95, step {summary['test_solved_step']}"),
    )


if __name__ == "__main__":
    main()
