"""What opting in to glibc malloc tuning buys (SELECTOR_LENS_KEEP_FREED_MEMORY=1), as ratios
measured in one run: the same training steps and dense evaluations (paper model, K=10,
n_bases=1000), each in a fresh process with the option off and on, alternated three times.

Usage: python benchmarks/bench_malloc.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

from selector_lens.model.fused import KEEP_FREED_MEMORY

CHILD = """
import json, resource, sys
sys.path.insert(0, "benchmarks")
import selector_lens as sl
from bench_core import timed, toolkit_steps
from selector_lens.model import fused
from selector_lens.task.eval_set import make_eval_set

cfg = sl.TrainConfig(task=sl.SelectorTask(k=10, n_bases=1000))
data = cfg.task.generate()
(model,), step = toolkit_steps(cfg, data.tokens)
es = make_eval_set(data, "auto", cfg.seed)
step_s = timed(step, 30)
eval_s = timed(lambda: sl.evaluate(model, es), 5)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
print(json.dumps({"tuned": fused.keep_freed_memory(), "step": step_s, "eval": eval_s,
                  "faults": faults}))
"""


def measure(on: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != KEEP_FREED_MEMORY}
    if on:
        env[KEEP_FREED_MEMORY] = "1"
    out = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    runs = {False: [], True: []}
    for _ in range(3):
        for on in (False, True):
            runs[on].append(measure(on))
    if not all(r["tuned"] for r in runs[True]):
        print("bench_malloc: skipped (glibc's malloc could not be tuned here)")
        return

    def med(on, key):
        return statistics.median(r[key] for r in runs[on])

    for key, label in (("step", "train step"), ("eval", "dense evaluation")):
        print(
            f"{label:18s} off {med(False, key) * 1e3:7.1f} ms  on {med(True, key) * 1e3:7.1f} ms"
            f"  = {med(True, key) / med(False, key):.2f} x"
        )
    print(
        f"{'page faults':18s} off {med(False, 'faults'):9,.0f}  on {med(True, 'faults'):9,.0f}"
        f"  = {med(True, 'faults') / med(False, 'faults'):.2f} x  (whole process)"
    )


if __name__ == "__main__":
    main()
