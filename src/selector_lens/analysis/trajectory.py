"""Weight norms and displacements across a run's checkpoints (the paper's weight-norm test).

Read straight from the safetensors files (checksums verified), one checkpoint at a time: no
model is built per checkpoint. A deep-grokking style mechanism predicts a norm peak before the
transition; the paper reports the total norm growing monotonically.
"""

from __future__ import annotations

import math

from selector_lens.errors import SelectorLensError
from selector_lens.lazy import lazy_module

torch = lazy_module("torch")  # imported on first use: a stored table needs no torch


def _state(run, step: int, names: list[str]) -> dict[str, torch.Tensor]:
    from selector_lens.model.adapter import read_checkpoint

    if not run.has_weights:
        raise SelectorLensError(
            f"{run.path} is a published run: its weights are not included (step {step})"
        )
    state, _ = read_checkpoint(run.ckpt_path(step))
    return {n: state[n].double() for n in names}


def trajectory(states) -> list[dict]:
    """Rows from (step, {name: tensor}) in step order: `total_norm` (all parameters), `norm.<name>`
    per weight matrix, `displacement` / `disp.<name>` from the previous checkpoint, and `cosine`
    between this displacement and the previous one (NaN where undefined)."""
    rows, prev, prev_delta = [], None, None
    for step, state in states:
        row = {
            "step": step,
            "total_norm": math.sqrt(sum(float(t.pow(2).sum()) for t in state.values())),
        }
        row.update({f"norm.{n}": float(t.norm()) for n, t in state.items() if t.dim() >= 2})
        if prev is None:
            row.update({"displacement": math.nan, "cosine": math.nan})
            delta = None
        else:
            delta = {n: state[n] - prev[n] for n in state}
            sq = sum(float(d.pow(2).sum()) for d in delta.values())
            row["displacement"] = math.sqrt(sq)
            row.update({f"disp.{n}": float(d.norm()) for n, d in delta.items() if d.dim() >= 2})
            if prev_delta is None or sq == 0:
                row["cosine"] = math.nan
            else:
                dot = sum(float((delta[n] * prev_delta[n]).sum()) for n in delta)
                other = math.sqrt(sum(float(d.pow(2).sum()) for d in prev_delta.values()))
                row["cosine"] = dot / (math.sqrt(sq) * other) if other > 0 else math.nan
        rows.append(row)
        prev, prev_delta = state, delta
    return rows


TRAJECTORY_VERSION = "1"  # bump when the numbers change: stored tables are then recomputed


def weight_trajectory(run, steps=None, recompute: bool = False):
    """`trajectory` over a run's checkpoints (default: all), as a DataFrame. Kept in the run's
    analysis store (a step's displacement depends on the steps before it, so the key holds them
    all); `recompute=True` bypasses it."""
    from selector_lens.runs.store import per_step

    steps = run.steps if steps is None else sorted(steps)
    if not steps:
        raise SelectorLensError(f"{run.path} has no checkpoints yet")
    return per_step(
        run,
        "weights",
        TRAJECTORY_VERSION,
        {"steps": steps},
        steps,
        lambda todo: _weight_table(run, steps),
        recompute,
        together=True,
    )


def _weight_table(run, steps):
    import pandas as pd

    from selector_lens.model.adapter import build_model

    cfg = run.config
    names = [n for n, _ in build_model(cfg.model, cfg.task, cfg.seed).named_parameters()]
    return pd.DataFrame(trajectory((s, _state(run, s, names)) for s in steps))
