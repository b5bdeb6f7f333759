"""Branching: train on from a kept training state of a run, with something changed.

The child is a run directory of its own. Its `run.json` records the parent, the branch step and
each change ("branch"); up to the branch step it holds the parent's evaluations and weights
(hard links where the filesystem allows), and from there it trains as `--resume` would. With no
change it continues bit for bit as the parent did (at the same thread count): nothing random
happens after initialisation but the batch order, a pure function of (seed, step).

Changes, combinable:
- any training option (`lr`, `batch_size`, `weight_decay`, `grad_clip`, `schedule`, `steps`,
  `optimizer` and `momentum`, and `seed`, which in a branch seeds only the batch order);
- `reset_adam`: the optimizer starts afresh (no moments; so does a change of optimizer);
- `freeze_heads`: each head's W_Q, W_K, W_V, W_O slices and b_Q, b_K, b_V get no update,
  weight decay included;
- `reinit_heads`: those slices drawn again as at initialisation (biases zero), at the branch;
- `ablate_heads` with `ablate_mode` zero or mean: the head's output (hook_z) replaced in every
  training and evaluation forward, through the evaluation's own `HeadAblation` (mean: its mean
  over the training set at the branch step, stored with the branch);
- `z`: "permute" (each example's z drawn from its group's at every step: the z -> A map is
  gone) or "drop" (z is [PAD]);
- `noise_scale` C: each step's gradient is ḡ + C (g_B - ḡ), the minibatch's noise scaled around
  an estimate of the full-batch gradient, with the same lr, batch and examples (`noise`); C = 1
  steps exactly as no change does and records what the others record.
The task and the model are the parent's: a branch continues the same network on the same data.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from selector_lens import __version__
from selector_lens.analysis.ablation import MODES, head_label, parse_head
from selector_lens.config import OPTIONS, TrainConfig, from_options
from selector_lens.errors import SelectorLensError
from selector_lens.files import atomic_write, atomic_write_text
from selector_lens.runs import rundir
from selector_lens.runs.run import Run
from selector_lens.runs.rundir import BRANCH
from selector_lens.training.interventions import ABLATION_VALUES, Z_CHANGES
from selector_lens.training.noise import REFERENCE_X, REFRESH_EVERY
from selector_lens.training.trainer import batch_key, read_state, state_for, train_many


@dataclass(frozen=True)
class Changes:
    """What a branch changes (see the module docstring); `options` are training options."""

    options: dict = field(default_factory=dict)
    reset_adam: bool = False
    freeze_heads: tuple = ()
    reinit_heads: tuple = ()
    ablate_heads: tuple = ()
    ablate_mode: str = "mean"
    z: str | None = None
    noise_scale: float | None = None

    @property
    def label(self) -> str:
        """A short name for the branch's directory: 'lr2e-3-freeze-L0H3', 'same'."""
        parts = [f"{k}{v}" for k, v in self.options.items()]
        parts += ["reset-adam"] * self.reset_adam
        for kind, heads in (
            ("freeze", self.freeze_heads),
            ("reinit", self.reinit_heads),
            (f"ablate-{self.ablate_mode}", self.ablate_heads),
        ):
            parts += [f"{kind}-{h}" for h in heads]
        parts += [f"z-{self.z}"] if self.z else []
        parts += [f"noise{self.noise_scale:g}"] if self.noise_scale is not None else []
        return "-".join(parts) or "same"


def child_config(parent: TrainConfig, options: dict) -> TrainConfig:
    """The parent's config with training options changed; the task and the model are refused."""
    unknown = sorted(k for k in options if k not in OPTIONS)
    if unknown:
        raise SelectorLensError(
            f"unknown option {unknown[0]!r} in a branch; training options only, e.g. lr, "
            "batch_size, weight_decay, grad_clip, schedule, steps, optimizer, seed"
        )
    fixed = sorted(k for k in options if OPTIONS[k].section != "train")
    if fixed:
        raise SelectorLensError(
            f"a branch keeps the parent's task and model; {fixed[0]!r} cannot change "
            "(train a new run instead)"
        )
    return from_options({**parent.options(), **options})


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


def _heads(labels, cfg: TrainConfig) -> list[str]:
    return [head_label(*h) for h in sorted({parse_head(x, cfg.model) for x in labels})]


def make_branch(parent: Run, step: int, out, changes: Changes) -> TrainConfig:
    """Write the branch's run directory (nothing trained yet) and return its config. Every
    check comes first: a refused branch writes nothing; the directory is made beside `out` and
    renamed into place once whole, so a killed branch leaves no half-made run."""
    out = Path(out)
    if rundir.is_run(out):
        raise SelectorLensError(f"{out} already holds a run; choose another --out")
    rundir.require_free(out)
    if step not in parent.state_steps:
        raise SelectorLensError(
            f"{parent.path} kept no training state at step {step}; nearest steps with one: "
            f"{_nearest(parent.state_steps, step)} (train with --state-every to keep more)"
        )
    cfg = child_config(parent.config, changes.options)
    if cfg.steps <= step:
        raise SelectorLensError(
            f"the branch starts at step {step} but its budget is {cfg.steps} steps; "
            "pass a larger steps"
        )
    if changes.z is not None and changes.z not in Z_CHANGES:
        raise SelectorLensError(f"unknown z change {changes.z!r}; choose permute or drop")
    if changes.z is not None and not cfg.task.has_z:
        raise SelectorLensError(f"the {cfg.task.direction} task has no z to change")
    if changes.noise_scale is not None and not (
        isinstance(changes.noise_scale, (int, float)) and 0 <= changes.noise_scale < math.inf
    ):
        raise SelectorLensError(
            f"noise_scale must be a number >= 0 (1: the ordinary step), got {changes.noise_scale!r}"
        )
    if changes.ablate_mode not in ("zero", "mean"):
        raise SelectorLensError(
            f"ablation during training is zero or mean, got {changes.ablate_mode!r} "
            f"(evaluation also has {', '.join(m for m in MODES if m not in ('zero', 'mean'))})"
        )
    record = {  # the parent relative to the branch: a tree moved or published whole keeps it
        "parent": os.path.relpath(parent.path.resolve(), out.resolve()),
        "step": step,
        "changes": changes.options,
        "reset_adam": changes.reset_adam,
        "freeze_heads": _heads(changes.freeze_heads, cfg),
        "reinit_heads": _heads(changes.reinit_heads, cfg),
        "ablate_heads": _heads(changes.ablate_heads, cfg),
        "ablate_mode": changes.ablate_mode,
        "z": changes.z,
    }
    if changes.noise_scale is not None:  # how ḡ is estimated, kept for a resume
        record["noise_scale"] = float(changes.noise_scale)
        record["noise_reference"] = {"reference_x": REFERENCE_X, "every": REFRESH_EVERY}
    state = read_state(parent.state_path_at(step), parent.config)
    partial = out.with_name(f".{out.name}.partial-{os.getpid()}")
    try:
        rundir.create(
            partial,
            cfg.to_dict(),
            __version__,
            parent.task_data.to_json(),
            eval_groups=parent.info.get("eval_groups"),
            **{BRANCH: record},
        )
        child = Run(partial)
        for s in parent.steps:
            if s <= step:
                _link_or_copy(parent.ckpt_path(s), child.ckpt_path(s))
        _link_or_copy(parent.state_path_at(step), child.state_path_at(step))
        rows = [r for r in parent.metric_rows() if r["step"] <= step]
        text = "".join(json.dumps(r) + "\n" for r in rows)
        atomic_write_text(child.path / rundir.METRICS, text)
        if record["reinit_heads"] or record["ablate_heads"]:
            _at_the_branch(parent, child, step, cfg, record)
        new = state_for(cfg, state, fresh=changes.reset_adam)
        atomic_write(child.state_path, lambda tmp: torch.save(new, tmp))
        os.replace(partial, out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return cfg


def _at_the_branch(parent: Run, child: Run, step: int, cfg: TrainConfig, record: dict) -> None:
    """Reinitialise heads in the child's weights at the branch step (replacing the link to the
    parent's file, never writing through it), and store the mean outputs of ablated heads."""
    from safetensors.torch import save_file

    from selector_lens.analysis.ablation import head_ablation
    from selector_lens.model.adapter import save_weights

    model = parent.model_at(step)
    if record["reinit_heads"]:
        g = torch.Generator().manual_seed(cfg.seed)
        std = model.cfg.initializer_range
        with torch.no_grad():
            for label in record["reinit_heads"]:
                layer, head = parse_head(label, cfg.model)
                attn = model.blocks[layer].attn
                for name in ("W_Q", "W_K", "W_V", "W_O"):
                    p = getattr(attn, name)
                    p[head] = torch.randn(p[head].shape, generator=g) * std
                for name in ("b_Q", "b_K", "b_V"):
                    getattr(attn, name)[head] = 0.0
        save_weights(model, child.ckpt_path(step), step, child.config_hash)
    if record["ablate_heads"] and record["ablate_mode"] == "mean":

        class _Training:  # head_ablation reads an evaluation set's tokens: the training set's
            tokens = parent.task_data.tokens

        heads = [parse_head(h, cfg.model) for h in record["ablate_heads"]]
        ablation = head_ablation(model, _Training, heads, "mean")
        values = {head_label(*k): v.contiguous() for k, v in ablation.values.items()}
        atomic_write(child.path / ABLATION_VALUES, lambda tmp: save_file(values, str(tmp)))


def _spec(changes: dict | Changes | None, options: dict, **kw) -> Changes:
    if isinstance(changes, Changes):
        return changes
    kw = {k: tuple(v) if k.endswith("_heads") else v for k, v in kw.items()}
    return Changes(options={**(changes or {}), **options}, **kw)


def branch(
    run,
    step: int,
    out,
    changes: dict | Changes | None = None,
    *,
    reset_adam: bool = False,
    freeze_heads=(),
    reinit_heads=(),
    ablate_heads=(),
    ablate_mode: str = "mean",
    z: str | None = None,
    noise_scale: float | None = None,
    progress: bool = False,
    **options,
) -> Run:
    """Branch `run` at `step` (a step with a kept training state) into `out` and train the child
    to its budget: `branch(run, 500, "b", lr=2e-3, freeze_heads=["L0H3"])`,
    `branch(run, 500, "quiet", noise_scale=0.0)`. Training options
    come as `changes` (a dict) or keywords. Returns the child run."""
    parent = run if isinstance(run, Run) else Run.open(run)
    spec = _spec(
        changes,
        options,
        reset_adam=reset_adam,
        freeze_heads=freeze_heads,
        reinit_heads=reinit_heads,
        ablate_heads=ablate_heads,
        ablate_mode=ablate_mode,
        z=z,
        noise_scale=noise_scale,
    )
    cfg = make_branch(parent, step, out, spec)
    return train_many([cfg], [out], resume=True, progress=progress)[0]


def branches(run, step: int, out, specs, seeds=None) -> list[Run]:
    """Several branches of one parent at one step, `specs` (Changes or dicts of options) x
    `seeds` (batch-order seeds; None: the parent's), into `out/<label>-s<seed>`, trained
    together as one batched model where they share a batch shape (`train_many`)."""
    parent = run if isinstance(run, Run) else Run.open(run)
    made = []
    for spec in specs:
        spec = _spec(spec, {}) if not isinstance(spec, Changes) else spec
        for seed in seeds or [parent.config.seed]:
            one = Changes(**{**asdict(spec), "options": {**spec.options, "seed": seed}})
            where = Path(out) / f"{spec.label}-s{seed}"
            made_before = rundir.is_run(where)  # a branch made earlier: trained on, not remade
            cfg = Run.open(where).config if made_before else make_branch(parent, step, where, one)
            made.append((cfg, where))
    groups: dict[tuple, list] = {}
    for cfg, where in made:
        groups.setdefault(batch_key(cfg), []).append((cfg, where))
    done = {}
    for members in groups.values():
        runs = train_many([c for c, _ in members], [w for _, w in members], resume=True)
        done.update({str(w): r for (_, w), r in zip(members, runs)})
    return [done[str(w)] for _, w in made]
