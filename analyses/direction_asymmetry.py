"""Claim 6: learning (B, z) -> A is faster than the one-to-one reverse A -> B (paper: 1.7x-4.4x).

    python analyses/direction_asymmetry.py --scale cpu [--executor local|ray] [--out DIR]

Both directions train on the same strings (the generator does not depend on the direction) with
the same model and optimiser, over several seeds. Waiting time, defined identically for both:
the first eval step with teacher-forced token accuracy (target tokens + EOS) >= 0.95
(`transition.solve_time`). Runs stop early once solved (TrainConfig's early stop). Writes DIR/asymmetry.json and DIR/asymmetry.html.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import plotly.graph_objects as go

from selector_lens.runs import Run
from selector_lens.sweep import SweepSpec, run_sweep, study_args
from selector_lens.transition import solve_time
from selector_lens.viz.dashboard import write_html

PRESETS = {
    "cpu": {"base": {"k": 5, "n_bases": 200, "steps": 4000, "eval_every": 20, "ckpt_every": 1000,
                     "eval_groups": "50"}, "seeds": [1, 2, 3]},
    "paper": {"base": {"k": 10, "n_bases": 1000, "steps": 20000, "eval_every": 50, "ckpt_every": 500},
              "seeds": [42, 43, 44, 45, 46]},
}
THRESHOLD = 0.95


def main() -> None:
    args, preset = study_args(__doc__, PRESETS, "asymmetry")
    out = args.out
    spec = SweepSpec(preset["base"], {"direction": ["bz_to_a", "a_to_b"], "seed": preset["seeds"]})
    t0 = time.perf_counter()
    results = run_sweep(spec, out, args.executor, args.workers, progress=True)
    wall = time.perf_counter() - t0
    times = {}
    for r in results:
        run = Run.open(r["run"])
        times[(run.config.task.direction, run.config.seed)] = solve_time(run.metric_rows(), THRESHOLD)
    rows, ratios = [], []
    for seed in preset["seeds"]:
        fwd, rev = times[("bz_to_a", seed)], times[("a_to_b", seed)]
        ratio = rev / fwd if fwd and rev else None
        rows.append({"seed": seed, "bz_to_a": fwd, "a_to_b": rev, "ratio": ratio})
        if ratio:
            ratios.append(ratio)
    summary = {"scale": args.scale, "wall_s": wall, "definition": f"first eval with token_acc >= {THRESHOLD}",
               "per_seed": rows, "paper_ratio_range": [1.7, 4.4],
               "ratio_mean": float(np.mean(ratios)) if ratios else None,
               "ratio_min": float(min(ratios)) if ratios else None, "ratio_max": float(max(ratios)) if ratios else None,
               "unsolved": [k for k, v in times.items() if v is None]}
    (out / "asymmetry.json").write_text(json.dumps(summary, indent=1, default=str))
    fig = go.Figure()
    for direction in ("bz_to_a", "a_to_b"):
        fig.add_bar(x=[str(r["seed"]) for r in rows], y=[r[direction] for r in rows], name=direction)
    fig.update_layout(title=f"Waiting time (token accuracy >= {THRESHOLD}) by direction; "
                      f"reverse / forward = {summary['ratio_mean'] or float('nan'):.2f} (paper 1.7-4.4)",
                      xaxis_title="seed", yaxis_title="steps", barmode="group")
    write_html(out / "asymmetry.html", f"Directional asymmetry ({args.scale})", [fig])
    for r in rows:
        print(r)
    print(f"ratio a_to_b / bz_to_a: mean {summary['ratio_mean']}, range [{summary['ratio_min']}, {summary['ratio_max']}]"
          f" (paper 1.7-4.4); wall time {wall:.0f} s")


if __name__ == "__main__":
    main()
