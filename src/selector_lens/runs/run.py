"""A run directory on disk (README: the run directory): `run.json`, `data.json`, `metrics.jsonl`, `ckpt/`.

`Run` reads one lazily; the trainer writes through it. Every file is written atomically or
appended and flushed line by line, so a killed run leaves nothing torn.
"""

from __future__ import annotations

import json
import re
from dataclasses import fields
from functools import cached_property
from pathlib import Path

from selector_lens.config import TrainConfig
from selector_lens.errors import SelectorLensError
from selector_lens.files import read_json
from selector_lens.runs import rundir

CKPT_RE = re.compile(r"step_(\d{6,})\.safetensors$")
STATE_RE = re.compile(r"state_(\d{6,})\.pt$")


class Run:
    """One training run's directory; everything downstream reads runs through this."""

    def __init__(self, path, progress: bool = False):
        self.path = Path(path)
        self.progress = progress  # a progress bar (on stderr) over checkpoints: the CLI's choice

    @classmethod
    def open(cls, path, progress: bool = False) -> Run:
        run = cls(path, progress)
        if not rundir.is_run(run.path):
            raise SelectorLensError(f"not a run directory (no run.json): {run.path}")
        _ = run.info  # validates run.json now
        return run

    @classmethod
    def latest(cls, root="checkpoints", progress: bool = False) -> Run:
        """The most recently created run under `root` (what the CLI uses without --run): by
        run.json's `created` time, not its modification time, which every resume and status
        change moves."""

        def created(p: Path) -> tuple:
            try:
                return (read_json(p).get("created") or "", p.stat().st_mtime)
            except (SelectorLensError, OSError):
                return ("", 0.0)

        found = sorted(Path(root).glob(f"**/{rundir.RUN_JSON}"), key=created)
        if not found:
            raise SelectorLensError(
                f"no run found under {root}/ (train one with `selector-lens train`)"
            )
        return cls.open(found[-1].parent, progress)

    # --- files -----------------------------------------------------------------------------
    @property
    def ckpt_dir(self) -> Path:
        return self.path / rundir.CKPT_DIR

    def ckpt_path(self, step: int) -> Path:
        return self.ckpt_dir / f"step_{step:06d}.safetensors"

    @property
    def state_path(self) -> Path:
        """The last checkpoint's training state: what `--resume` reads."""
        return self.ckpt_dir / rundir.STATE

    def state_path_at(self, step: int) -> Path:
        """A kept training state (`state_every`): where `branch` can start."""
        return self.ckpt_dir / f"state_{step:06d}.pt"

    @property
    def state_steps(self) -> list[int]:
        """Steps with a kept training state, ascending."""
        if not self.ckpt_dir.is_dir():
            return []
        return sorted(
            int(m.group(1)) for p in self.ckpt_dir.iterdir() if (m := STATE_RE.search(p.name))
        )

    # --- contents --------------------------------------------------------------------------
    @property
    def info(self) -> dict:
        """run.json: config, status, version, created, eval groups, summary (read fresh)."""
        return read_json(self.path / rundir.RUN_JSON)

    @cached_property
    def config(self) -> TrainConfig:
        try:
            return TrainConfig.from_dict(self.info["config"])
        except (KeyError, TypeError) as e:
            raise SelectorLensError(
                f"corrupt file: {self.path / rundir.RUN_JSON} (bad config: {e})"
            ) from None

    @property
    def status(self) -> str:
        return rundir.status(self.path)

    @property
    def parent(self) -> Run | None:
        """The run this one branched from (`branch`), or None."""
        record = self.info.get(rundir.BRANCH)
        if not record:
            return None
        path = (self.path / record["parent"]).resolve()  # relative to this run (or absolute)
        if not rundir.is_run(path):
            raise SelectorLensError(
                f"{self.path} branched from {path}, which is not a run directory now"
            )
        return Run.open(path, self.progress)

    def children(self) -> list[Run]:
        """The runs branched from this one (`branch`), found where branches are made: beside
        it (`--out` next to the parent) and in `<root>/branches/<name>/step<S>/` (the
        studies'), ordered by branch step, then name."""
        here = self.path.resolve()
        studies = self.path.parent.parent / "branches" / self.path.name
        found = {}
        for info in [
            *self.path.parent.glob(f"*/{rundir.RUN_JSON}"),
            *studies.glob(f"*/*/{rundir.RUN_JSON}"),
        ]:
            record = read_json(info).get(rundir.BRANCH)
            if record and (info.parent / record["parent"]).resolve() == here:
                found[info.parent.resolve()] = (record["step"], info.parent.name, info.parent)
        return [Run.open(p, self.progress) for *_, p in sorted(found.values())]

    @property
    def lineage(self) -> list[tuple[Run, int | None]]:
        """From the root run to this one: [(root, None), (child, its branch step), ...]."""
        chain, run = [], self
        while run is not None and len(chain) <= 1000:  # a loop of hand-edited run.json's ends
            record = run.info.get(rundir.BRANCH)
            chain.append((run, record["step"] if record else None))
            run = run.parent
        return chain[::-1]

    def metric_rows(self) -> list[dict]:
        """Parsed lines of metrics.jsonl; a torn last line (killed mid-write) is skipped."""
        path = self.path / rundir.METRICS
        if not path.is_file():
            packed = self.path / rundir.METRICS_PACKED  # a published run
            if not packed.is_file():
                return []
            import gzip

            path, lines = packed, gzip.decompress(packed.read_bytes()).decode().splitlines()
        else:
            lines = path.read_text().splitlines()
        rows = []
        for i, line in enumerate(lines):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                if i < len(lines) - 1:
                    raise SelectorLensError(f"corrupt file: {path} (line {i + 1})") from None
        return rows

    @property
    def metrics(self):
        """DataFrame, one row per eval step (nested per-head / per-group values as lists)."""
        import pandas as pd

        return pd.DataFrame(self.metric_rows())

    @property
    def steps(self) -> list[int]:
        """Steps that have a weight checkpoint, ascending (a published run: those it left out,
        listed in its manifest, so phases and stored analyses still resolve)."""
        if not self.ckpt_dir.is_dir():
            from selector_lens.runs.store import MANIFEST

            manifest = self.path / MANIFEST
            return sorted(int(s) for s in read_json(manifest)) if manifest.is_file() else []
        return sorted(
            int(m.group(1)) for p in self.ckpt_dir.iterdir() if (m := CKPT_RE.search(p.name))
        )

    @cached_property
    def task_data(self):
        """The exact dataset from data.json; a published run (which leaves it out) regenerates it
        from its config, which is deterministic."""
        if (
            not (self.path / rundir.DATA_JSON).is_file()
            and (self.path / rundir.METRICS_PACKED).is_file()
        ):
            return self.config.task.generate()
        return self.config.task.load(read_json(self.path / rundir.DATA_JSON))

    @property
    def config_hash(self) -> str:
        from selector_lens.model.adapter import config_hash

        return config_hash(self.config.task, self.config.model)

    def check_step(self, step: int) -> None:
        """One clear error for a step without a checkpoint, naming the nearest ones."""
        if step not in set(self.steps):
            near = sorted(sorted(self.steps, key=lambda s: abs(s - step))[:3])
            raise SelectorLensError(
                f"no checkpoint at step {step} in {self.path}"
                + (f"; nearest: {', '.join(map(str, near))}" if near else "; the run has none")
            )

    def model_at(self, step: int, model=None):
        """A HookedTransformer with the weights of `step` (loaded in place into `model` if given)."""
        from selector_lens.model.adapter import build_model, load_weights

        self.check_step(step)
        if not self.has_weights:
            raise SelectorLensError(
                f"{self.path} is a published run: its weights are not included (step {step})"
            )
        if model is None:
            model = build_model(self.config.model, self.config.task, self.config.seed)
        load_weights(model, self.ckpt_path(step), self.config_hash, step)
        return model

    @property
    def has_weights(self) -> bool:
        """False for a published run (its checkpoints are listed, not included)."""
        return self.ckpt_dir.is_dir()

    def tau(self, threshold: float = 0.5) -> int | None:
        """The task's transition step (the selector's τ: the first eval with candidate loss <
        threshold x log K); None: no transition yet."""
        task = self.config.task
        if threshold != 0.5:  # the selector's τ at another line
            return task.transition(self.metric_rows(), threshold)
        return task.transition(self.metric_rows())

    def transition_line(self, threshold: float = 0.5) -> str:
        """What the run's task calls its transition, in words."""
        task = self.config.task
        if task.name == "selector":
            return f"candidate loss < {threshold} log K"
        what = (task.transition.__doc__ or "").strip().splitlines()[0:1] or ["its step"]
        return f"its {task.name} transition ({what[0][:1].lower()}{what[0][1:].rstrip('.')})"

    def require_tau(self, consequence: str, threshold: float = 0.5) -> int:
        """τ, or one clear error saying the run has not transitioned and what follows from it."""
        t = self.tau(threshold)
        if t is None:
            raise SelectorLensError(
                f"{self.path} never reaches {self.transition_line(threshold)} (no transition "
                f"yet): {consequence}"
            )
        return t

    def eval_set(self):
        """The run's own evaluation set: the groups recorded in run.json (else drawn as in training)."""
        groups = self.info.get("eval_groups")
        cfg = self.config
        return cfg.task.eval_set(self.task_data, cfg.seed, groups, eval_groups=cfg.eval_groups)

    # --- step selection --------------------------------------------------------------------
    def nearest_step(self, target: float) -> int:
        if not self.steps:
            raise SelectorLensError(f"{self.path} has no checkpoints yet")
        return min(self.steps, key=lambda s: (abs(s - target), s))

    def phases(self, threshold: float = 0.5) -> dict[str, int]:
        """Named checkpoints: pre = τ/4 (early plateau), mid = 3τ/4 (late plateau), post = 1.5τ
        (after the drop; the last checkpoint if the run ended sooner), final = last checkpoint."""
        t = self.require_tau("the phases pre/mid/post are undefined; pass --step", threshold)
        out = {name: self.nearest_step(frac * t) for name, frac in PHASES.items()}
        return {**out, "final": self.steps[-1]}

    def labelled_steps(self, step=None, phase=None, every=None) -> list[tuple[str | None, int]]:
        """The checkpoints a per-phase analysis (ablation, patching, the landscape) reads, as
        (label, step): the step options when given (at most one), else pre / mid / post / final,
        or only the final step of a run that never transitions (`tau()` is None)."""
        chosen = [o for o in (step, phase, every) if o is not None]
        if len(chosen) > 1:
            raise SelectorLensError("give at most one of --step, --phase, --every")
        if chosen:
            labels = {v: k for k, v in self.phases().items()} if phase is not None else {}
            steps = self.select_steps(step=step, phase=phase, every=every)
            return [(labels.get(s), s) for s in steps]
        if self.tau() is None:
            return [("final", self.steps[-1])] if self.steps else self.select_steps()
        first = {}  # a checkpoint two phases share (sparse checkpoints) is read once
        for label, s in self.phases().items():
            first.setdefault(s, label)
        return [(label, s) for s, label in first.items()]

    def select_steps(self, step=None, phase=None, every=None, around_tau=None) -> list[int]:
        """One selection rule: a step, a phase name, every n-th checkpoint, or those within
        `around_tau` x τ of τ; with none of them, all checkpoints."""
        if step is not None:
            self.check_step(step)
            return [step]
        if phase is not None:
            phases = self.phases()
            if phase not in phases:
                raise SelectorLensError(
                    f"unknown phase {phase!r}; choose one of {', '.join(phases)}"
                )
            return [phases[phase]]
        steps = self.steps
        if not steps:
            raise SelectorLensError(f"{self.path} has no checkpoints yet")
        if every is not None:
            if every < 1:
                raise SelectorLensError(f"--every must be >= 1, got {every}")
            steps = steps[::every]
        if around_tau is not None:
            t = self.require_tau("no window around τ to select")
            steps = [s for s in steps if abs(s - t) <= around_tau * t]
        return steps

    def prune(self, window=(0.25, 2.0), thin_every: int = 4, dry_run: bool = True) -> dict:
        """Retention: keep every checkpoint with window[0] τ <= step <= window[1] τ (the dense
        window the analyses read: pre = τ/4 .. post = 1.5τ), step 0, the last one, and every
        `thin_every`-th of the rest; delete the others unless `dry_run`. Needs a τ."""
        t = self.require_tau("the dense window around τ is unknown, nothing pruned")
        lo, hi = window
        if not 0 <= lo <= 1 <= hi or thin_every < 1:
            raise SelectorLensError(
                "the window must satisfy 0 <= start <= 1 <= end (in units of τ), thin_every >= 1"
            )
        steps = self.steps
        outside = [s for s in steps if not lo * t <= s <= hi * t]
        keep = {
            steps[0],
            steps[-1],
            *[s for s in steps if lo * t <= s <= hi * t],
            *outside[::thin_every],
        }
        drop = [s for s in steps if s not in keep]
        states = [self.state_path_at(s) for s in drop if self.state_path_at(s).is_file()]
        freed = sum(self.ckpt_path(s).stat().st_size for s in drop) + sum(
            p.stat().st_size for p in states
        )
        if not dry_run:  # a state goes with its step's weights: a branch needs both
            for s in drop:
                self.ckpt_path(s).unlink()
            for p in states:
                p.unlink()
        return {
            "tau": t,
            "window_steps": (lo * t, hi * t),
            "keep": sorted(keep),
            "drop": drop,
            "states_dropped": len(states),
            "freed_mb": freed / 1e6,
            "dry_run": dry_run,
        }

    def series(self, steps=None) -> CheckpointSeries:
        return CheckpointSeries(self, self.steps if steps is None else steps, self.progress)

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r})"


PHASES = {"pre": 0.25, "mid": 0.75, "post": 1.5}


def run_table(root, threshold: float = 0.5):
    """One row per run directory under `root` (a sweep), or per directory in a list of them: its
    settings, τ and plateau height."""
    import pandas as pd

    from selector_lens.runs.transition import summarize

    rows = []
    paths = (
        [Path(p) for p in root]
        if isinstance(root, (list, tuple))
        else [p.parent for p in sorted(Path(root).glob(f"**/{rundir.RUN_JSON}"))]
    )
    for path in paths:
        run = Run.open(path)
        cfg, t = run.config, run.config.task
        evals = run.metric_rows()
        seen = {r["step"]: r["examples_seen"] for r in evals}
        if t.name != "selector":  # another task: its options, its transition and last step
            tau = t.transition(evals)
            rows.append(
                {
                    "run": str(run.path),
                    "task": t.name,
                    **{f.name: getattr(t, f.name) for f in fields(t) if f.name != "seed"},
                    "D": t.n_examples,
                    "lr": cfg.lr,
                    "weight_decay": cfg.weight_decay,
                    "batch_size": cfg.batch_size,
                    "seed": cfg.seed,
                    "status": run.status,
                    "tau": tau,
                    "tau_examples": seen.get(tau),
                    "final_step": evals[-1]["step"] if evals else None,
                    "error": rundir.read_error(run.path),
                }
            )
            continue
        s = summarize(evals, t.log_k, threshold)
        rows.append(
            {
                "run": str(run.path),
                "k": t.k,
                "n_bases": t.n_bases,
                "D": t.n_examples,
                "direction": t.direction,
                "z_length": t.z_length,
                "z_groups": t.z_groups,
                "lr": cfg.lr,
                "weight_decay": cfg.weight_decay,
                "batch_size": cfg.batch_size,
                "seed": cfg.seed,
                "status": run.status,
                "tau": s["tau"],
                "tau_examples": seen.get(s["tau"]),
                "tau_first_target": s["tau_first_target"],
                "plateau_over_log_k": s["plateau_over_log_k"],
                "final_step": s["final_step"],
                "error": rundir.read_error(run.path),
            }
        )
    if not rows:
        raise SelectorLensError(
            f"no run found under {root}/"
            if not isinstance(root, (list, tuple))
            else "no runs given"
        )
    return pd.DataFrame(rows)


class CheckpointSeries:
    """A run's checkpoints as (step, model), loaded lazily and in place into one model."""

    def __init__(self, run: Run, steps, progress: bool = False):
        self.run, self.steps, self.progress = run, list(steps), progress
        self._model = None

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def model(self):
        if self._model is None:
            from selector_lens.model.adapter import build_model

            cfg = self.run.config
            self._model = build_model(cfg.model, cfg.task, cfg.seed)
            self._model.eval()
        return self._model

    def __iter__(self):
        from selector_lens.runs.progress import tracked

        several = self.progress and len(self.steps) > 1  # one step: its caller reports
        steps = tracked(self.steps, "checkpoints") if several else self.steps
        for step in steps:
            yield step, self.run.model_at(step, self.model)
