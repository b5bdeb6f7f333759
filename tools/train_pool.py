"""Train named runs of a reproduction scale one after another, resuming each where it stopped.

    OMP_NUM_THREADS=1 python tools/train_pool.py --scale paper --root checkpoints/reproduce/paper \
        k20-nb1000-paper-s42 k13-nb1000-s42 ...

A development helper for runs that outlast one sitting: each run trains on the threads
OMP_NUM_THREADS allows (keep it fixed across resumes: a resume is bit for bit only at one thread
count), finished runs are skipped, and `tools/inflight.py save` carries the unfinished ones to
another machine. Publish what finished with `selector-lens publish`.
"""

import argparse
import os
import sys

from selector_lens.paper.presets import pool
from selector_lens.training.sweep import run_jobs, trained


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="+")
    p.add_argument("--scale", default="paper")
    p.add_argument("--root", default="checkpoints/reproduce/paper")
    a = p.parse_args()
    runs = pool(a.scale)
    unknown = [n for n in a.names if n not in runs]
    if unknown:
        print(f"not runs of the {a.scale} scale: {', '.join(unknown)}", file=sys.stderr)
        return 2
    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    for name in a.names:
        out = os.path.join(a.root, "runs", name)
        if trained(runs[name], out):
            print(f"{name}: finished already", flush=True)
            continue
        print(f"{name}: training on {threads} thread(s)", flush=True)
        (outcome,) = run_jobs([(runs[name], out)], workers=1)
        print(f"{name}: {outcome}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
