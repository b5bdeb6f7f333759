"""Claim 2: the plateau's length is set by D, not K (τ ∝ D^~1.2; flat in K at fixed D).

    python analyses/scaling_in_d.py --scale cpu   [--executor local|ray] [--workers N] [--out DIR]

Two sweeps under DIR: `d/` (τ vs D at fixed K) and `k/` (τ vs K at fixed D). Writes DIR/scaling.json
(every run's τ and the fits) and DIR/scaling.html (τ vs D with the fitted line and band, τ vs K).
`--scale paper` is the paper's grid: K = 3..36 at n_bases = 1000 (11 points), and K in
{5, 10, 20, 36} at D = 10k and 20k; hours on two cores.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd

from selector_lens.runs import run_table
from selector_lens.sweep import SweepSpec, run_sweep, study_args
from selector_lens.transition import power_law_fit, scaling_fits
from selector_lens.viz import tau_vs_d, tau_vs_k
from selector_lens.viz.dashboard import write_html

PRESETS = {
    # two cores: D = 500..4000 at K = 5, and K = 4, 5, 10 at D = 2000; ~10 minutes
    "cpu": {
        "base": {"steps": 4000, "eval_every": 20, "ckpt_every": 500, "eval_groups": "50", "seed": 42},
        "d": {"k": [5], "D": [500, 1000, 2000, 4000]},
        "k": {"k": [4, 5, 10], "D": [2000]},
    },
    "paper": {
        "base": {"steps": 20000, "eval_every": 50, "ckpt_every": 100, "seed": 42},
        "d": {"k": [3, 4, 5, 6, 8, 10, 12, 16, 20, 25, 36], "n_bases": [1000]},
        "k": {"k": [5, 10, 20, 36], "D": [10000, 20000]},
    },
}


def main() -> None:
    args, preset = study_args(__doc__, PRESETS, "scaling")
    out = args.out
    t0 = time.perf_counter()
    for part in ("d", "k"):
        run_sweep(SweepSpec(preset["base"], preset[part]), out / part, args.executor, args.workers, progress=True)
    wall = time.perf_counter() - t0
    tables = {part: run_table(out / part) for part in ("d", "k")}
    fits = scaling_fits(tables["d"])
    k_fits = scaling_fits(tables["k"])
    fits["tau_vs_K"] = k_fits["tau_vs_K"]
    table = pd.concat([tables["d"], tables["k"]], ignore_index=True)
    fits["k_beyond_D"] = scaling_fits(table)["k_beyond_D"]
    result = {"scale": args.scale, "executor": args.executor, "wall_s": wall,
              "tau_definition": "first eval step with candidate_loss < 0.5 * log K",
              "paper": {"alpha_D": 1.19, "alpha_D_ci": [1.14, 1.31], "alpha_K": 0.0},
              "fits": fits, "runs": table.to_dict(orient="records")}
    (out / "scaling.json").write_text(json.dumps(result, indent=1, default=str))
    done = tables["d"][tables["d"].tau.notna()]
    fit = power_law_fit(done.D, done.tau) if done.D.nunique() >= 2 else None
    write_html(out / "scaling.html", f"τ scaling ({args.scale})", [tau_vs_d(tables["d"], fit), tau_vs_k(tables["k"])])
    for r in table.itertuples():
        print(f"K={r.k:>3} D={r.D:>6} τ={r.tau}")
    f = fits["tau_vs_D"]
    if f:
        print(f"τ vs D: α = {f['alpha']:.3f} [{f['alpha_ci'][0]:.3f}, {f['alpha_ci'][1]:.3f}], R² {f['r2']:.3f} "
              "(paper 1.19 [1.14, 1.31])")
    for d, f in fits["tau_vs_K"].items():
        print(f"τ vs K at D={d}: β = {f['alpha']:.3f} [{f['alpha_ci'][0]:.3f}, {f['alpha_ci'][1]:.3f}] (paper ~0)")
    print(f"wall time {wall:.0f} s ({args.executor}); wrote {out / 'scaling.json'} and {out / 'scaling.html'}")


if __name__ == "__main__":
    main()
