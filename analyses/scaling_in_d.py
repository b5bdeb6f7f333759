"""Claim 2: the plateau's length is set by D, not K (τ ∝ D^~1.2; flat in K at fixed D).

    python analyses/scaling_in_d.py --scale cpu   [--executor local|ray|batched] [--workers N] [--out DIR]

Two sweeps under DIR: `d/` (τ vs D at fixed K) and `k/` (τ vs K at fixed D). Writes DIR/scaling.json
(every run's τ and the fits) and DIR/scaling.html (τ vs D with the fitted line and band, τ vs K).
`--scale cpu`: K=5 at D = 500..4000 and K = 4, 5, 10 at D = 2000 (~8 min). `--scale paper` is the
paper's grid: K = 3..36 at n_bases = 1000 (11 points), and K in {5, 10, 20, 36} at D = 10k and 20k.
The study itself lives in `selector_lens.studies.scaling` (also used by `selector-lens reproduce`).
"""

from selector_lens.studies import script_main

if __name__ == "__main__":
    script_main("scaling", __doc__)
