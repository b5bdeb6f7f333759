"""Claim 2: the plateau's length is set by D, not K (τ ∝ D^~1.2; flat in K at fixed D).

    python analyses/scaling_in_d.py --scale cpu   [--executor local|ray|batched] [--workers N] [--root DIR]

Two parts: τ vs D at fixed n_bases (or K) and τ vs K at fixed D; the runs go to DIR/runs/ (shared
with the other studies). Writes DIR/scaling/scaling.json (every run's τ and the fits) and .html
(τ vs D with the fitted line and band, τ vs K). `--scale cpu`: K=5 at D = 500..4000 and K = 4, 5,
10 at D = 2000 (~8 min). `--scale paper`: K = 3, 5, 7, 10, 15, 20, 25, 36 at n_bases = 1000, and
K in {5, 10, 20, 36} at D = 10k and 20k (`selector-lens reproduce --scale paper --plan` costs it).
The study itself lives in `selector_lens.paper.studies.scaling` (also used by `selector-lens reproduce`).
"""

import sys

from selector_lens.cli import main

if __name__ == "__main__":  # the same command line as `selector-lens study scaling`
    main(["study", "scaling", *sys.argv[1:]])
