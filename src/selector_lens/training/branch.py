"""Branching: train on from a kept training state of a run, with something changed.

The child is a run directory of its own. Its `run.json` records the parent, the branch step and
each change ("branch"); up to the branch step it holds the parent's evaluations and weights
(hard links where the filesystem allows), and from there it trains as `--resume` would. With no
change it continues bit for bit as the parent did (at the same thread count): nothing random
happens after initialisation but the batch order, a pure function of (seed, step).

Changes: any training option (`lr`, `batch_size`, `weight_decay`, `grad_clip`, `schedule`,
`steps`, `seed`, the batch order's seed, ...); `reset_adam` (the optimizer starts afresh: no
moments, bias correction from step 1); `freeze_heads` (each head's W_Q, W_K, W_V, W_O slices
and its b_Q, b_K, b_V get no update, weight decay included). The task and the model are the
parent's: a branch continues the same network on the same data.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch

from selector_lens import __version__
from selector_lens.analysis.ablation import head_label, parse_head
from selector_lens.config import OPTIONS, TrainConfig, from_options
from selector_lens.errors import SelectorLensError
from selector_lens.files import atomic_write, atomic_write_text
from selector_lens.runs import rundir
from selector_lens.runs.run import Run
from selector_lens.runs.rundir import BRANCH
from selector_lens.training.trainer import read_state, state_for, train


def child_config(parent: TrainConfig, changes: dict) -> TrainConfig:
    """The parent's config with training options changed; the task and the model are refused."""
    fixed = sorted(k for k in changes if k in OPTIONS and OPTIONS[k].section != "train")
    unknown = sorted(k for k in changes if k not in OPTIONS)
    if unknown:
        raise SelectorLensError(
            f"unknown option {unknown[0]!r} in a branch; training options only, e.g. lr, "
            "batch_size, weight_decay, grad_clip, schedule, steps, seed"
        )
    if fixed:
        raise SelectorLensError(
            f"a branch keeps the parent's task and model; {fixed[0]!r} cannot change "
            "(train a new run instead)"
        )
    return from_options({**parent.options(), **changes})


def _nearest(steps: list[int], step: int) -> str:
    """The kept states on either side of `step`: '20, 40'."""
    below = [s for s in steps if s < step][-1:]
    above = [s for s in steps if s > step][:1]
    return ", ".join(str(s) for s in below + above) or "none"


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def branch(
    run,
    step: int,
    out,
    changes: dict | None = None,
    reset_adam: bool = False,
    freeze_heads=(),
    progress: bool = False,
) -> Run:
    """Branch `run` at `step` (a step with a kept training state) into `out` with `changes`
    (training options), `reset_adam` and `freeze_heads` ('L0H3', ...), and train the child to
    its budget. Returns the child run."""
    parent = run if isinstance(run, Run) else Run.open(run)
    out, changes = Path(out), dict(changes or {})
    if step not in parent.state_steps:
        raise SelectorLensError(
            f"{parent.path} kept no training state at step {step}; nearest steps with one: "
            f"{_nearest(parent.state_steps, step)} (train with --state-every to keep more)"
        )
    cfg = child_config(parent.config, changes)
    heads = sorted({parse_head(h, cfg.model) for h in freeze_heads})
    if cfg.steps <= step:
        raise SelectorLensError(
            f"the branch starts at step {step} but its budget is {cfg.steps} steps; "
            "pass a larger steps"
        )
    state = read_state(parent.state_path_at(step), parent.config)
    record = {
        "parent": str(parent.path.resolve()),
        "step": step,
        "changes": changes,
        "reset_adam": reset_adam,
        "freeze_heads": [head_label(layer, head) for layer, head in heads],
    }
    rundir.create(
        out,
        cfg.to_dict(),
        __version__,
        parent.task_data.to_json(),
        eval_groups=parent.info.get("eval_groups"),
        **{BRANCH: record},
    )
    child = Run(out)
    for s in parent.steps:
        if s <= step:
            _link_or_copy(parent.ckpt_path(s), child.ckpt_path(s))
    _link_or_copy(parent.state_path_at(step), child.state_path_at(step))
    rows = [r for r in parent.metric_rows() if r["step"] <= step]
    atomic_write_text(child.path / rundir.METRICS, "".join(json.dumps(r) + "\n" for r in rows))
    if reset_adam:
        state["optimizer"]["state"] = {}
    new = state_for(cfg, state)
    atomic_write(child.state_path, lambda tmp: torch.save(new, tmp))
    return train(cfg, out, resume=True, progress=progress)
