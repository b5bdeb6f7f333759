"""The training step against the matmul floor of this machine (issue 6), measured in one run.

Floor: every GEMM of one training step of the paper model (forward, and the two backward GEMMs
of each weight: dX = dY W^T, dW = X^T dY), timed alone as torch.mm on its own shape, summed.
Attention score / value products are batched matmuls and counted the same way. The machine is
shared and noisy: the floor and both steps are measured in alternating rounds, ratios per round.

Strict floor: the same FLOPs at this machine's best rate, the fastest of square fp32 products
(256 to 2048); the step's own small GEMMs run well below that rate, so the strict floor shows the
headroom the per-shape floor hides. Last, the end-to-end CLI step: `selector-lens train` for 600
and for 100 steps (no evaluation or checkpoint in between), the difference over 500 steps; at 2
threads, in rounds interleaved with `../shared/bench/plain_loop.py` (the plain HookedTransformer
loop and its matmul floor, as a user runs it), so both references print in one run (issue 46).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
from bench_core import timed, toolkit_steps  # benchmarks/ is on sys.path when run as a script

import selector_lens as sl
from selector_lens.task.order import BatchOrder

ROUNDS = 5
CLI_ROUNDS = 3  # `selector-lens train` against plain_loop.py, from the shell
THREADS = (1, 2)
SQUARE = (256, 512, 1024, 2048)


def step_gemms(
    cfg: sl.ModelConfig, batch: int, seq: int, vocab: int
) -> list[tuple[int, int, int, int]]:
    """(count, m, k, n) of the step's matmuls: X[m, k] @ W[k, n], forward and backward."""
    rows, d, hd = batch * seq, cfg.d_model, cfg.n_heads * cfg.d_head
    linear = [(d, 3 * hd), (hd, d), (d, cfg.d_mlp), (cfg.d_mlp, d)]  # QKV, O, MLP in, MLP out
    out = []
    for k, n in linear:
        out += [(cfg.n_layers, rows, k, n), (cfg.n_layers, rows, n, k), (cfg.n_layers, k, rows, n)]
    out += [(1, rows, d, vocab), (1, rows, vocab, d), (1, d, rows, vocab)]  # unembed
    bh = batch * cfg.n_heads
    for m, k, n in ((seq, cfg.d_head, seq), (seq, seq, cfg.d_head)):  # scores, weighted values
        out += [(cfg.n_layers * bh, m, k, n)] * 3  # forward and two backward products
    return out


def floor_seconds(gemms) -> tuple[float, float]:
    total, flops = 0.0, 0.0
    for count, m, k, n in gemms:
        if count > 64:  # batched attention products: time them as one bmm
            a, b = torch.randn(count, m, k), torch.randn(count, k, n)
            total += timed(lambda a=a, b=b: torch.bmm(a, b))
        else:
            a, b = torch.randn(m, k), torch.randn(k, n)
            total += count * timed(lambda a=a, b=b: torch.mm(a, b))
        flops += 2 * count * m * k * n
    return total, flops


def best_rate() -> float:
    """The machine's best matmul rate, FLOP/s, over square fp32 products."""
    rates = []
    for n in SQUARE:
        a, b = torch.randn(n, n), torch.randn(n, n)
        rates.append(2 * n**3 / timed(lambda a=a, b=b: torch.mm(a, b)))
    return max(rates)


def cli_step_seconds(short: int = 100, long: int = 600, threads: int = 1) -> float:
    """Seconds per step of `selector-lens train` (K = 10, n_bases = 1000), end to end: a `long`
    and a `short` run, evaluations and checkpoints only at their ends (no analysis after), the
    difference per step."""
    times = []
    for n in (short, long):
        with tempfile.TemporaryDirectory() as tmp:
            args = [
                "--k",
                "10",
                "--n-bases",
                "1000",
                "--steps",
                n,
                "--eval-every",
                n,
                "--ckpt-every",
                n,
            ]
            cmd = [sys.executable, "-m", "selector_lens", "train", *map(str, args)]
            t = time.perf_counter()
            subprocess.run(
                [*cmd, "--no-early-stop", "--no-analyze", "--out", f"{tmp}/r", "--json"],
                check=True,
                capture_output=True,
                env={**os.environ, "OMP_NUM_THREADS": str(threads)},
            )
            times.append(time.perf_counter() - t)
    return (times[1] - times[0]) / (long - short)


def main() -> None:
    task = sl.SelectorTask(k=10, n_bases=1000)
    cfg = sl.TrainConfig(task=task)
    data = task.generate()
    _, toolkit_step = toolkit_steps(cfg, data.tokens)
    _, compiled_step = toolkit_steps(cfg, data.tokens, compiled=True)
    t = time.perf_counter()
    compiled_step()
    compile_s = time.perf_counter() - t
    model = sl.build_model(cfg.model, task, cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    order = BatchOrder(task.n_examples, cfg.batch_size, cfg.seed)
    steps = iter(range(1, 10**9))

    def plain():  # the textbook loop: full-sequence loss, no masking of the source positions
        x = data.tokens[order.indices(next(steps))]
        loss = model(x, return_type="loss")
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    gemms = step_gemms(cfg.model, cfg.batch_size, task.seq_len, 40)
    print(f"torch.compile of the step: {compile_s:.0f} s, once a process (--compile)")
    step_at = {}  # threads -> the toolkit step
    for threads in THREADS:
        torch.set_num_threads(threads)
        # the machine is shared: interleave the measurements and take each ratio per round
        rounds = []
        for _ in range(ROUNDS):
            floor, flops = floor_seconds(gemms)
            measured = [timed(f, 15) for f in (toolkit_step, compiled_step, plain)]
            rounds.append((floor, *measured, flops / best_rate()))
        med = [statistics.median(r[i] for r in rounds) for i in range(5)]
        floor, toolkit, compiled, plain_s, strict = med

        def ratio(i, j, rounds=rounds):
            return statistics.median(r[i] / r[j] for r in rounds)

        step_at[threads] = toolkit

        print(f"--- {threads} thread(s), {ROUNDS} interleaved rounds")
        print(
            f"matmul floor of one step:  {floor * 1e3:7.1f} ms ({flops / 1e9:.1f} GFLOP, "
            f"{flops / floor / 1e9:.0f} GFLOP/s)"
        )
        print(
            f"toolkit train step:        {toolkit * 1e3:7.1f} ms = {ratio(1, 0):.2f} x floor, "
            f"plain / toolkit {ratio(3, 1):.2f}  (rounds "
            f"{', '.join(f'{r[1] / r[0]:.2f}' for r in rounds)})"
        )
        print(
            f"  compiled (--compile):    {compiled * 1e3:7.1f} ms = {ratio(2, 0):.2f} x floor, "
            f"plain / compiled {ratio(3, 2):.2f}"
        )
        print(f"plain HookedTransformer:   {plain_s * 1e3:7.1f} ms = {ratio(3, 0):.2f} x floor")
        print(
            f"strict floor (the step's FLOPs at the best square-matmul rate, "
            f"{flops / strict / 1e9:.0f} GFLOP/s): {strict * 1e3:.1f} ms; toolkit step = "
            f"{ratio(1, 4):.2f} x strict floor"
        )
    torch.set_num_threads(1)
    cli = cli_step_seconds(threads=1)
    print(
        f"selector-lens train, end to end, 1 thread (600 - 100 steps): {cli * 1e3:7.1f} ms a step "
        f"= {cli / step_at[1]:.2f} x the in-process step at 1 thread"
    )
    # at 2 threads, against the shared reference (its own fresh process, 2 threads as it sets):
    # both from the shell and noisy alone (81 and 104 ms in two runs), so rounds, interleaved
    rounds = []
    for _ in range(CLI_ROUNDS):
        cli = cli_step_seconds(threads=2) * 1e3
        reference = plain_loop()
        if reference is None:
            break
        rounds.append((cli, reference["naive_ms"], reference["floor_ms"]))
    if rounds:
        cli, plain_ms, floor_ms = (statistics.median(r[i] for r in rounds) for i in range(3))
        faster = statistics.median(r[1] / r[0] for r in rounds)
        above = statistics.median(r[0] / r[2] for r in rounds)
        print(
            f"selector-lens train, end to end, 2 threads: {cli:.1f} ms a step = "
            f"{cli / 1e3 / step_at[2]:.2f} x the in-process step; ../shared/bench/plain_loop.py: "
            f"plain loop {plain_ms:.1f} ms, its floor {floor_ms:.1f} ms; median of {len(rounds)} "
            f"rounds: {faster:.2f} x faster than the plain loop (goal >= 1.5), {above:.2f} x its "
            f"floor (goal <= 1.4); rounds "
            + ", ".join(f"{r[1] / r[0]:.2f} / {r[0] / r[2]:.2f}" for r in rounds)
        )


def plain_loop() -> dict | None:
    """The shared reference's JSON (`../shared/bench/plain_loop.py`, a plain HookedTransformer +
    AdamW loop and the step's matmul floor), run as a user runs it; None where it is absent."""
    import json
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "shared" / "bench" / "plain_loop.py"
    if not script.is_file():
        print(f"(no {script}: the shared reference is not on this machine)")
        return None
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
