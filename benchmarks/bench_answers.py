"""Answer times as a user sees them (issue 29): each a fresh `selector-lens` process from the
shell, imports included.

Always: the dashboard of the published K = 10 run, its tables stored (in the repository). With
`--run DIR` (a run with checkpoints, e.g. checkpoints/reproduce/paper/runs/k10-nb1000-st50-s42):
`find_routing_head` and the dashboard on a copy of it without its store. Goals: < 1.5 s, < 8 s,
< 20 s.

Usage: python benchmarks/bench_answers.py [--run DIR]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PUBLISHED = Path("analyses/results/paper/runs/k10-nb1000-s42")


def seconds(args: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, capture_output=True)
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run", type=Path)
    run = parser.parse_args().run
    with tempfile.TemporaryDirectory() as tmp:
        out = f"{tmp}/d.html"
        stored = seconds(["-m", "selector_lens", "dashboard", "--run", str(PUBLISHED), "-o", out])
        print(f"dashboard, tables stored ({PUBLISHED}): {stored:.1f} s (goal < 1.5 s)")
        if run is None:
            print("store-less answers: pass --run DIR (a run with checkpoints)")
            return
        copies = []
        for name in ("a", "b"):
            shutil.copytree(run, f"{tmp}/{name}", ignore=shutil.ignore_patterns("analyses"))
            copies.append(f"{tmp}/{name}")
        code = (
            "import selector_lens as sl; from selector_lens.analysis.routing import "
            f"find_routing_head; find_routing_head(sl.Run.open({copies[0]!r}))"
        )
        print(
            f"find_routing_head, no store ({run.name}): {seconds(['-c', code]):.1f} s (goal < 8 s)"
        )
        empty = seconds(["-m", "selector_lens", "dashboard", "--run", copies[1], "-o", out])
        print(f"dashboard, empty store ({run.name}): {empty:.1f} s (goal < 20 s)")


if __name__ == "__main__":
    main()
