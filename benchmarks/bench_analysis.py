"""Analysis cost against training cost for one run (a ratio measured in one run).

One pass over every checkpoint computing attention to z, Δz and one head's mean ablation:
(a) recomputing the clean metrics, (b) reading them from metrics.jsonl as the toolkit does.
Training time, measured in this same process (the run's recorded wall time may have shared the
machine): its steps x one training step + its evals x one evaluation, at the run's settings.
Then the questions a researcher asks after training, on a copy of the run without its analysis
store: `find_routing_head` and the 3 x n_heads x n_layers head ablations at pre / mid / post
(cold), the dashboard cold (everything computed and stored) and warm (drawn from the store).
Goals (issue 16): cold dashboard under 30 s, warm under 3 s, find_routing_head under 10 s.
Usage: python benchmarks/bench_analysis.py [RUN_DIR]   (default: the latest run under checkpoints/)
"""

from __future__ import annotations

import sys
import time

from bench_core import timed, toolkit_steps  # benchmarks/ is on sys.path when run as a script

import selector_lens as sl
from selector_lens.analysis.ablation import head_ablation


def training_seconds(run) -> float:
    """The run's training time re-measured here: steps x step time + evals x eval time."""
    (model,), step = toolkit_steps(run.config, run.task_data.tokens)
    step_s = timed(step, 20)
    es = run.eval_set()
    eval_s = timed(lambda: sl.evaluate(model, es), 2)
    rows = run.metric_rows()
    return rows[-1]["step"] * step_s + len(rows) * eval_s


def main() -> None:
    try:
        run = sl.Run.open(sys.argv[1]) if len(sys.argv) > 1 else sl.Run.latest()
    except sl.SelectorLensError as e:
        print(f"bench_analysis: skipped ({e})")
        return
    summary = run.info.get("summary") or {}
    recorded = summary.get("wall_time_s")
    train_s = training_seconds(run)
    head = (0, 0)
    es = run.eval_set()
    steps = run.steps
    t = time.perf_counter()
    for _step, model in run.series(steps):
        sl.evaluate(model, es)  # attention to z and Δz, recomputed
        sl.evaluate(model, es, intervention=head_ablation(model, es, [head], "mean"))
    recomputed = time.perf_counter() - t
    t = time.perf_counter()
    sl.attention_to_z(run)
    sl.ablate_heads(run, [head], "mean", steps)
    stored = time.perf_counter() - t
    print(
        f"run {run.path}: {len(steps)} checkpoints; training re-measured here {train_s:.0f} s "
        f"(recorded wall time {recorded if recorded is None else round(recorded)} s)"
    )
    for name, secs in (
        ("recomputing clean metrics", recomputed),
        ("clean metrics from metrics.jsonl", stored),
    ):
        ratio = f" = {secs / train_s:.2f} x training" if train_s else ""
        print(f"attention + Δz + one head's mean ablation, {name}: {secs:7.1f} s{ratio}")
    if run.tau() is not None and run.config.task.has_z:
        questions(run, train_s)


def questions(run, train_s: float) -> None:
    """Cold and warm answers on a copy of the run whose analysis store is empty."""
    import shutil
    import tempfile
    from pathlib import Path

    from selector_lens.runs.store import STORE_DIR
    from selector_lens.viz.dashboard import run_dashboard

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / run.path.name
        shutil.copytree(run.path, copy, ignore=shutil.ignore_patterns(STORE_DIR))
        fresh = sl.Run.open(copy)
        phases = fresh.phases()
        lines = []
        t = time.perf_counter()
        sl.find_routing_head(fresh, phases["post"])
        lines.append(("find_routing_head (cold)", time.perf_counter() - t))
        t = time.perf_counter()
        sl.ablate_each_head(fresh, sorted({phases[p] for p in ("pre", "mid", "post")}))
        n = 3 * run.config.model.n_layers * run.config.model.n_heads
        lines.append(
            (f"{n} head ablations at pre / mid / post (post stored)", time.perf_counter() - t)
        )
        shutil.rmtree(copy / STORE_DIR)
        for label in ("dashboard, cold", "dashboard, warm"):
            t = time.perf_counter()
            run_dashboard(fresh, Path(tmp) / "d.html")
            lines.append((label, time.perf_counter() - t))
        size = sum(p.stat().st_size for p in (copy / STORE_DIR).rglob("*") if p.is_file())
    for label, secs in lines:
        ratio = f" = {secs / train_s:.3f} x training" if train_s else ""
        print(f"{label}: {secs:7.1f} s{ratio}")
    print(f"analysis store after the dashboard: {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
