"""Grokking at Nanda's settings (p = 113, 30 % of the pairs, full-batch AdamW, weight decay 1):
the toolkit's `train --task modular` against the plain HookedTransformer loop a researcher writes
first, both from the shell in fresh processes, at the same thread count.

The time per step is the difference between a long and a short run of each (start-up, imports and
the dataset cancel), so the ratio compares steps alone; the time to test accuracy 0.95 is that
per-step time times the steps the published run took to get there
(analyses/results/tasks/modular/summary.json), plus the start-up. `--full` trains the toolkit's
run to 0.95 for real and prints its wall time instead of the projection.

    python benchmarks/bench_grokking.py [--threads 2] [--full]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUMMARY = Path(__file__).resolve().parents[1] / "analyses/results/tasks/modular/summary.json"
NANDA = ["--task", "modular", "--p", "113", "--train-frac", "0.3", "--n-layers", "1",
         "--normalization-type", "none", "--act-fn", "relu", "--weight-decay", "1.0",
         "--beta2", "0.98", "--warmup-steps", "10", "--grad-clip", "0",
         "--batch-size", "3831"]  # fmt: skip

PLAIN = """
import sys, time, torch
from transformer_lens import HookedTransformer, HookedTransformerConfig
steps, p = int(sys.argv[1]), 113
cfg = HookedTransformerConfig(n_layers=1, d_model=128, n_heads=4, d_head=32, d_mlp=512,
    act_fn="relu", normalization_type=None, d_vocab=p + 1, d_vocab_out=p, n_ctx=3, seed=0)
model = HookedTransformer(cfg)
pairs = torch.randperm(p * p, generator=torch.Generator().manual_seed(0))[: round(0.3 * p * p)]
a, b = pairs // p, pairs % p
x, y = torch.stack([a, b, torch.full_like(a, p)], 1), (a + b) % p
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1.0, betas=(0.9, 0.98))
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(s / 10, 1))
for step in range(steps):
    loss = torch.nn.functional.cross_entropy(model(x)[:, -1], y)
    opt.zero_grad(); loss.backward(); opt.step(); sched.step()
"""


def shell(cmd: list[str], threads: int) -> float:
    """Wall seconds of `cmd` in a fresh process at `threads` threads."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    t = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def toolkit(steps: int, out: Path, threads: int, eval_every: int = 100) -> list[str]:
    return [sys.executable, "-m", "selector_lens", "train", *NANDA, "--steps", str(steps),
            "--eval-every", str(eval_every), "--ckpt-every", str(max(steps, 1)),
            "--no-early-stop", "--no-analyze", "--out", str(out), "--json"]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--short", type=int, default=50)
    ap.add_argument("--long", type=int, default=250)
    ap.add_argument("--full", action="store_true", help="Train the toolkit's run to 0.95.")
    args = ap.parse_args()
    summary = json.loads(SUMMARY.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        plain = [sys.executable, "-c", PLAIN]
        t_plain = [shell([*plain, str(n)], args.threads) for n in (args.short, args.long)]
        t_ours = [
            shell(toolkit(n, tmp / f"r{n}", args.threads), args.threads)
            for n in (args.short, args.long)
        ]
        span = args.long - args.short
        per_plain = (t_plain[1] - t_plain[0]) / span
        per_ours = (t_ours[1] - t_ours[0]) / span
        steps = summary["test_solved_step"]
        out = {
            "threads": args.threads,
            "plain_s_per_step": round(per_plain, 4),
            "toolkit_s_per_step": round(per_ours, 4),
            "speedup_per_step": round(per_plain / per_ours, 2),
            "steps_to_test_acc_0.95": steps,
            "toolkit_min_to_0.95_projected": round((steps * per_ours + t_ours[0]) / 60, 1),
            "plain_min_for_as_many_steps": round((steps * per_plain + t_plain[0]) / 60, 1),
        }
        if args.full:
            run = tmp / "full"
            cmd = [*toolkit(20_000, run, args.threads)]
            cmd[cmd.index("--no-early-stop")] = "--early-stop"
            cmd += ["--early-stop-frac", "0.05", "--early-stop-evals", "1"]
            out["toolkit_min_to_0.95_measured"] = round(shell(cmd, args.threads) / 60, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
