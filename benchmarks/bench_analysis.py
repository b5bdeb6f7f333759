"""Analysis cost against training cost for one run (a ratio measured in one run).

One pass over every checkpoint computing attention to z, Δz and one head's mean ablation:
(a) recomputing the clean metrics, (b) reading them from metrics.jsonl as the toolkit does.
Usage: python benchmarks/bench_analysis.py [RUN_DIR]   (default: the latest run under checkpoints/)
"""

from __future__ import annotations

import sys
import time

import selector_lens as sl
from selector_lens.interventions.ablation import head_ablation


def main() -> None:
    try:
        run = sl.Run.open(sys.argv[1]) if len(sys.argv) > 1 else sl.Run.latest()
    except sl.SelectorLensError as e:
        print(f"bench_analysis: skipped ({e})")
        return
    summary = run.info.get("summary") or {}
    train_s = summary.get("wall_time_s")
    head = (0, 0)
    es = run.eval_set()
    steps = run.steps
    t = time.perf_counter()
    for step, model in run.series(steps):
        sl.evaluate(model, es)  # attention to z and Δz, recomputed
        sl.evaluate(model, es, intervention=head_ablation(model, es, [head], "mean"))
    recomputed = time.perf_counter() - t
    t = time.perf_counter()
    sl.attention_to_z(run)
    sl.ablate_heads(run, [head], "mean", steps)
    stored = time.perf_counter() - t
    print(f"run {run.path}: {len(steps)} checkpoints, training wall time {train_s:.0f} s" if train_s else
          f"run {run.path}: {len(steps)} checkpoints (no training time recorded)")
    for name, secs in (("recomputing clean metrics", recomputed), ("clean metrics from metrics.jsonl", stored)):
        ratio = f" = {secs / train_s:.2f} x training" if train_s else ""
        print(f"attention + Δz + one head's mean ablation, {name}: {secs:7.1f} s{ratio}")


if __name__ == "__main__":
    main()
