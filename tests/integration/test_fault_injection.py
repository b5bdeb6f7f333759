"""Fault injection: a small run killed with SIGKILL at 20 seeded random moments (with a
checkpoint every 2 steps, many land inside a checkpoint write), resumed each time, ends bit for
bit equal to the same run trained without interruption."""

import json
import random
import signal
import time

import pytest
from safetensors.torch import load_file

import selector_lens as sl
from tests.helpers import SMALL_RUN, logged, train_process

OPTIONS = [*SMALL_RUN, "--lr", "3e-3", "--steps", "300", "--eval-every", "2"]
OPTIONS += ["--ckpt-every", "2", "--no-early-stop"]
KILLS = 20


def train(out):
    return train_process(*OPTIONS, "--out", out, "--resume", "--json")


@pytest.mark.slow
def test_twenty_sigkills_resume_to_the_uninterrupted_run_bit_for_bit(tmp_path):
    ref = train(tmp_path / "ref")
    assert ref.wait(timeout=300) == 0, ref.stderr.read()
    rng = random.Random(0)
    out, mid_write, t0 = tmp_path / "killed", 0, time.perf_counter()
    for _ in range(KILLS):
        proc = train(out)
        log, started = out / "metrics.jsonl", time.perf_counter()
        seen = log.stat().st_size if log.is_file() else 0
        while proc.poll() is None and time.perf_counter() - started < 60:  # until it trains
            if log.is_file() and log.stat().st_size > seen:
                break
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 0.3))  # then a random moment of training
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        mid_write += any(p.name.endswith(".tmp") for p in out.rglob(".*"))
    last = train(out)
    assert last.wait(timeout=300) == 0, last.stderr.read()
    a, b = sl.Run.open(tmp_path / "ref"), sl.Run.open(out)
    assert a.steps == b.steps == list(range(0, 301, 2))
    assert logged(a) == logged(b)
    for step in (2, 150, 300):
        wa, wb = load_file(a.ckpt_path(step)), load_file(b.ckpt_path(step))
        assert all((wa[k] == wb[k]).all() for k in wa), step
    assert json.loads((out / "run.json").read_text())["status"] in ("finished", "early_stopped")
    print(
        f"{KILLS} SIGKILLs, {mid_write} inside a write (a temporary file left behind), "
        f"{time.perf_counter() - t0:.0f} s"
    )
