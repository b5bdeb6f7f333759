"""The batched executor on a device: 1, 8 and 32 paper-model runs trained as one batched model
(`train_many`'s step, `training.trainer.train_step`) for a number of steps; prints steps per
second per run, peak GPU memory, and the paper preset's wall time projected from the best rate
(its planned steps, `reproduce --scale paper --plan`, at that rate). On a CPU it runs the same
at smaller counts. Run by benchmarks/gpu.sh; installs nothing."""

from __future__ import annotations

import argparse
import time

import torch

import selector_lens as sl
from selector_lens.paper.plan import expected_steps
from selector_lens.paper.presets import pool
from selector_lens.task.order import BatchOrder
from selector_lens.training.trainer import make_optimizer, train_step


def rate(n_runs: int, steps: int, device: str) -> tuple[float, float]:
    """Steps per second per run, and peak memory (GB; 0 on a CPU), for `n_runs` batched."""
    cfg = sl.TrainConfig(task=sl.SelectorTask(k=10, n_bases=1000), device=device)
    tokens = cfg.task.generate().tokens.to(device)
    models = [sl.build_model(cfg.model, cfg.task, seed, device) for seed in range(n_runs)]
    opts = [make_optimizer(cfg, m.parameters()) for m in models]
    orders = [BatchOrder(cfg.task.n_examples, cfg.batch_size, seed) for seed in range(n_runs)]
    first = cfg.task.first_target_pos

    def step(s):
        batches = torch.stack([tokens[o.indices(s).to(device)] for o in orders])
        train_step(models, opts, batches, first, cfg.grad_clip)

    step(1)  # warm-up (kernels, allocator)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    for s in range(2, steps + 2):
        step(s)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t
    memory = torch.cuda.max_memory_allocated() / 1e9 if device == "cuda" else 0.0
    return steps / seconds, memory


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--runs", type=int, nargs="+", default=None)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    counts = args.runs or ([1, 8, 32] if device == "cuda" else [1, 2, 4])
    name = (
        torch.cuda.get_device_name()
        if device == "cuda"
        else f"CPU, {torch.get_num_threads()} threads"
    )
    print(f"device: {name}; {args.steps} steps of the paper model (K = 10, batch 128) per count")
    best = 0.0
    for n in counts:
        per_run, memory = rate(n, args.steps, device)
        best = max(best, per_run * n)
        print(
            f"{n:3d} runs batched: {per_run:8.1f} steps/s per run, {per_run * n:8.1f} in all"
            + (f", peak memory {memory:.2f} GB" if device == "cuda" else "")
        )
    steps = sum(expected_steps(o) for o in pool("paper").values())  # every distinct run, once
    print(
        f"the paper preset: {steps:,} expected steps; at {best:.0f} steps/s in all: "
        f"{steps / best / 3600:.2f} h of training (evaluation and analyses not included)"
    )


if __name__ == "__main__":
    main()
