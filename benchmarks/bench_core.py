"""Core costs of the toolkit at the paper's scale, measured in one run (compare ratios, not seconds).

Prints: ms per training step (paper model, batch 128), four seeds as one batched step, one dense
evaluation at the default eval set (100 groups), at 200 groups and with --eval-groups all (K=10,
n_bases=1000, D=10,000), evaluation cost as a fraction of the training it sits between
(eval_every=50), checkpoint size, CLI --help latency.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import selector_lens as sl
from selector_lens.model.adapter import save_weights
from selector_lens.task.eval_set import make_eval_set
from selector_lens.task.order import BatchOrder
from selector_lens.training.trainer import compiled_losses, make_optimizer, train_step


def timed(fn, repeat: int = 20) -> float:
    """Median seconds of `repeat` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def toolkit_steps(cfg: sl.TrainConfig, tokens: torch.Tensor, seeds=(None,), compiled=False):
    """Fresh models (one per seed; None = the config's) with their AdamW, and a function doing
    one toolkit training step of all of them on the next batches of the run's data order
    (`compiled`: as `--compile` runs it)."""
    models = [sl.build_model(cfg.model, cfg.task, cfg.seed if s is None else s) for s in seeds]
    opts = [make_optimizer(cfg, m.parameters()) for m in models]
    order = BatchOrder(len(tokens), cfg.batch_size, cfg.seed)
    steps = iter(range(1, 10**9))

    def step():
        batches = torch.stack([tokens[order.indices(next(steps))] for _ in models])
        losses_of = compiled_losses() if compiled else None
        train_step(models, opts, batches, cfg.task.first_target_pos, cfg.grad_clip, (), losses_of)

    return models, step


def main() -> None:
    cfg = sl.TrainConfig(task=sl.SelectorTask(k=10, n_bases=1000))
    data = cfg.task.generate()
    (model,), step = toolkit_steps(cfg, data.tokens)
    step_s = timed(step, 30)
    # four seeds as one batched model (train_many's step) against four steps one after another
    batched_s = timed(toolkit_steps(cfg, data.tokens, seeds=range(4))[1], 10)
    n_params = sum(p.numel() for p in model.parameters())
    model.eval()
    es_default, es_all = make_eval_set(data, "auto", cfg.seed), make_eval_set(data, "all", cfg.seed)
    es_200 = make_eval_set(data, 200, cfg.seed)
    eval_default = timed(lambda: sl.evaluate(model, es_default), 3)
    eval_200 = timed(lambda: sl.evaluate(model, es_200), 3)
    eval_all = timed(lambda: sl.evaluate(model, es_all), 1)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "step.safetensors"
        save_weights(model, path, 0, "bench")
        ckpt_mb = path.stat().st_size / 1e6
    cli = timed(
        lambda: subprocess.run(
            [sys.executable, "-m", "selector_lens", "--help"], capture_output=True, check=True
        ),
        3,
    )

    between = cfg.eval_every * step_s
    print(
        f"model: {n_params:,} parameters, batch {cfg.batch_size}, torch threads {torch.get_num_threads()}"
    )
    print(f"train step                         {step_s * 1e3:8.1f} ms")
    print(
        f"4 runs as one batched step         {batched_s * 1e3:8.1f} ms   = {batched_s / (4 * step_s):.2f} x four single steps"
    )
    print(
        f"eval, default set ({len(es_default.tokens):>5} examples)  {eval_default:8.2f} s   "
        f"= {eval_default / between:.2f} x the {cfg.eval_every} steps between evals"
    )
    print(
        f"eval, --eval-groups 200 ({len(es_200.tokens)})  {eval_200:8.2f} s   "
        f"= {eval_200 / between:.2f} x the {cfg.eval_every} steps between evals"
    )
    print(
        f"eval, --eval-groups all ({len(es_all.tokens)})  {eval_all:8.2f} s   "
        f"= {eval_all / between:.2f} x the {cfg.eval_every} steps between evals"
    )
    print(
        f"checkpoint                         {ckpt_mb:8.2f} MB  (x {6000 // cfg.ckpt_every + 1} for 6000 steps "
        f"at ckpt_every={cfg.ckpt_every}: {ckpt_mb * (6000 // cfg.ckpt_every + 1):.0f} MB)"
    )
    print(f"selector-lens --help               {cli:8.2f} s")


if __name__ == "__main__":
    main()
