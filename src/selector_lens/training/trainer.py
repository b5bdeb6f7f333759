"""The training loop: AdamW, clipping, dense evaluation, atomic checkpoints, exact resume.

Nothing random happens after initialisation except the data order, and that is a pure
function of (seed, epoch), so a resumed run replays the same batches without saving RNG state.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import torch

from selector_lens import __version__
from selector_lens.analysis.ablation import parse_head
from selector_lens.config import RESUMABLE, TrainConfig
from selector_lens.errors import SelectorLensError
from selector_lens.files import atomic_write, atomic_write_text
from selector_lens.model import fused
from selector_lens.model.adapter import build_model, config_hash, save_weights, tensors_checksum
from selector_lens.runs import rundir
from selector_lens.runs.run import Run
from selector_lens.runs.transition import task_summary
from selector_lens.task.order import BatchOrder
from selector_lens.task.protocol import headline
from selector_lens.training.cadence import Cadence
from selector_lens.training.console import _CtrlC, _Progress
from selector_lens.training.interventions import (
    branch_ablation,
    frozen_slices,
    without_z,
)
from selector_lens.training.noise import NoiseScale
from selector_lens.training.trackers import check_tracker, open_tracker


def resolve_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise SelectorLensError("--device cuda asked for, but no CUDA device is available")
    return name


def lr_at(cfg: TrainConfig, step: int) -> float:
    """Learning rate for optimizer step `step` (1-based): linear warmup, then constant or a cosine
    to 0 at `cosine_steps` (default: `steps`). Parity "paper": the same schedule as the paper
    code's LambdaLR computes it (`task.paper.schedule_factor`)."""
    if getattr(cfg.task, "parity", None) == "paper":
        from selector_lens.task.paper import schedule_factor

        return cfg.lr * schedule_factor(cfg, step)
    if step <= cfg.warmup_steps:
        return cfg.lr * step / cfg.warmup_steps
    if cfg.schedule == "cosine":
        end = cfg.cosine_steps or cfg.steps
        frac = (step - cfg.warmup_steps) / max(1, end - cfg.warmup_steps)
        return cfg.lr * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))
    return cfg.lr


def target_losses(models, batches: torch.Tensor, first: int, hooks=()) -> torch.Tensor:
    """Each model's next-token cross-entropy over the target tokens and EOS [models]: `models`
    (same shape) as one batched model through `fused.forward` on `batches` [models, batch, pos];
    `hooks`: `hook_z` hooks of one model (a branch's ablated heads)."""
    if hooks:
        (model,) = models
        logits = fused.forward(model, batches[0], fwd_hooks=hooks, positions=slice(first, -1))
        logits = logits.unsqueeze(0)
    else:
        logits = fused.forward(list(models), batches, positions=slice(first, -1))  # [M, B, P, V]
    targets = batches[:, :, first + 1 :]
    return (
        torch.nn.functional.cross_entropy(
            logits.flatten(0, 2), targets.reshape(-1), reduction="none"
        )
        .view(len(models), -1)
        .mean(1)
    )


_compiled = None


def compiled_losses():
    """`target_losses` through torch.compile (inductor), compiled once a process."""
    global _compiled
    if _compiled is None:
        _compiled = torch.compile(target_losses)
    return _compiled


def train_step(
    models,
    opts,
    batches: torch.Tensor,
    first: int,
    grad_clip: float,
    hooks=(),
    losses_of=None,
    noises=None,
) -> torch.Tensor:
    """One optimizer step per model on `target_losses` (or `losses_of`, its compiled form):
    each model gets the gradient of its own loss, its own clipping and its own optimizer.
    `noises`: per model a `noise.NoiseScale` (its gradient's noise scaled before clipping, the
    step recorded) or None. Returns the losses [models]."""
    losses = (losses_of or target_losses)(models, batches, first, hooks)
    for opt in opts:
        opt.zero_grad(set_to_none=True)
    losses.sum().backward()
    for model, opt, noise in zip(models, opts, noises or [None] * len(models)):
        if noise:
            noise.mix(model)
        norm = None
        if grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip, foreach=True)
        before = (
            [p.detach().clone() for p in model.parameters() if p.requires_grad] if noise else []
        )
        opt.step()
        if noise:
            noise.record(None if norm is None else float(norm), grad_clip, before, model)
    return losses.detach()


def evaluate(model, eval_set, intervention=None, task=None) -> dict:
    """One evaluation row of `task` (default: the set's): `model.evaluation.evaluate`."""
    from selector_lens.model.evaluation import evaluate as task_evaluate

    return task_evaluate(task if task is not None else eval_set.task, model, eval_set, intervention)


def solved(cfg: TrainConfig, row: dict, first: dict) -> bool:
    """Is this eval below the early-stop line (the task's `solved`)? `first`: the step-0 row."""
    return cfg.task.solved(row, first, cfg)


def _prepare(cfg: TrainConfig, out: Path, resume: bool, restart: bool) -> tuple[Run, bool]:
    """Create the run directory, or check that it holds this run when resuming (or clear what it
    trained, on `restart`)."""
    run = Run(out)
    if rundir.is_run(out):
        diff = Run.open(out).config.differences(cfg)
        if diff:
            raise SelectorLensError(
                f"{out} holds a different run ({'; '.join(diff[:3])}); choose another --out"
            )
        if restart:
            _clear_training(run)
        elif not resume:
            raise SelectorLensError(
                f"{out} already holds this run; pass --resume to continue it, --restart to train "
                "it again from step 0, or choose another --out"
            )
        return run, run.state_path.is_file()
    rundir.create(out, cfg.to_dict(), __version__, cfg.task.generate().to_json())
    return run, False


def _clear_training(run: Run) -> None:
    """What a run trained (checkpoints, state, log, error, analyses), for `restart`."""
    import shutil

    from selector_lens.runs.store import STORE_DIR

    for path in (run.ckpt_dir, run.path / STORE_DIR):
        shutil.rmtree(path, ignore_errors=True)
    run.ckpt_dir.mkdir()
    for path in (run.state_path, run.path / rundir.METRICS, run.path / rundir.ERROR_JSON):
        path.unlink(missing_ok=True)


def _settings(cfg: TrainConfig) -> dict:
    """The settings a state was trained under: every option but those a resume may change."""
    return {k: v for k, v in cfg.options().items() if k not in RESUMABLE}


def _state_checksum(state: dict) -> str:
    """sha256 over a training state: its optimizer tensors, step, settings and param groups."""
    tensors = {
        f"{p}.{k}": v if isinstance(v, torch.Tensor) else torch.tensor(v)
        for p, s in state["optimizer"]["state"].items()
        for k, v in s.items()
    }
    for k, v in state.get("noise", {}).items():  # a noise-scaled branch's ḡ and records
        tensors.update(
            {f"noise.{k}.{i}": t for i, t in enumerate(v)} if k == "mean" else {f"noise.{k}": v}
        )
    head = {k: state[k] for k in ("step", "elapsed", "settings")}
    head["param_groups"] = state["optimizer"]["param_groups"]
    if "cadence" in state:  # (states written before it have none, and keep their checksum)
        head["cadence"] = state["cadence"]
    return tensors_checksum(tensors) + ":" + json.dumps(head, sort_keys=True, default=str)


def make_optimizer(cfg: TrainConfig, params) -> torch.optim.Optimizer:
    """AdamW (the paper's) or SGD with momentum, as `cfg` says; AdamW's fused kernel (one pass
    over each tensor, ~3 % of a CPU step saved; benchmarks/bench_floor.py)."""
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(
            params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay, foreach=True
        )
    return torch.optim.AdamW(
        params,
        lr=cfg.lr,
        betas=(cfg.beta1, cfg.beta2),
        weight_decay=cfg.weight_decay,
        fused=True,
    )


def read_state(path: Path, cfg: TrainConfig, device="cpu", out=None) -> dict:
    """A saved training state, checked: read with `weights_only=True` (a pickle with code is
    refused, never run), its checksum (states before checksums have none), and the settings it
    was trained under against `cfg`'s."""
    try:
        state = torch.load(path, map_location=device, weights_only=True)
        if not {"step", "elapsed", "optimizer"} <= state.keys():
            raise KeyError("step, elapsed or optimizer")
    except Exception as e:  # torn or foreign
        raise SelectorLensError(f"corrupt checkpoint: {path} ({type(e).__name__})") from None
    if "checksum" in state and state["checksum"] != _state_checksum(state):
        raise SelectorLensError(f"corrupt checkpoint: {path} (checksum mismatch)")
    if "settings" in state:
        now = _settings(cfg)
        diff = [
            f"{k}: {state['settings'][k]} (trained) != {now[k]} (run.json)"
            for k in sorted(state["settings"].keys() & now.keys())
            if state["settings"][k] != now[k]
        ]
        if diff:
            raise SelectorLensError(
                f"{out or path} was trained under other settings than its run.json says "
                f"({'; '.join(diff[:3])}); restore run.json or pass --restart"
            )
    return state


def state_for(cfg: TrainConfig, state: dict, fresh: bool = False) -> dict:
    """`state` as a run under `cfg` would have saved it: a branch's starting state. Its
    optimizer's hyperparameters (weight decay, betas, momentum) are `cfg`'s; `fresh`, or another
    optimizer: no moments, as a new optimizer starts. New settings, new checksum."""
    defaults = make_optimizer(cfg, [torch.nn.Parameter(torch.zeros(1))]).defaults
    optimizer = state["optimizer"]
    if fresh or cfg.optimizer != state.get("settings", {}).get("optimizer", "adamw"):
        optimizer = {"state": {}, "param_groups": optimizer["param_groups"]}
    groups = [{**g, **defaults, "params": g["params"]} for g in optimizer["param_groups"]]
    new = {**state, "optimizer": {**optimizer, "param_groups": groups}}
    new["settings"] = _settings(cfg)
    new["checksum"] = _state_checksum(new)
    return new


def batch_key(cfg: TrainConfig) -> tuple:
    """Runs with equal keys can train together as one batched model (`train_many`)."""
    return (
        cfg.model,
        cfg.task.seq_len,
        cfg.task.loss_start,
        cfg.batch_size,
        cfg.grad_clip,
        cfg.device,
    )


def train(
    cfg: TrainConfig,
    out=None,
    resume: bool = False,
    progress: bool = False,
    restart: bool = False,
    log: str | None = None,
) -> Run:
    """Train (or resume) one run and return it. `out` defaults to checkpoints/<cfg.name>.
    `restart` trains a run that exists again from step 0 (what it trained is removed). `log`:
    "tensorboard" or "wandb" mirrors every evaluation there (`trackers`)."""
    return train_many([cfg], [out], resume, progress, restart, log)[0]


def train_many(
    cfgs,
    outs=None,
    resume: bool = False,
    progress: bool = False,
    restart: bool = False,
    log: str | None = None,
) -> list[Run]:
    """Train several runs at once as one batched model: each step is one set of GEMMs for all.

    The runs must share the model shape, sequence length, batch size and device (a sweep over
    seeds, lr, K at one direction...); each keeps its own data, optimizer, evaluation,
    checkpoints and early stop, and drops out of the batch when it ends. On a GPU this fills the
    device with small models; on CPU it costs what the runs cost one after another.
    """
    cfgs = list(cfgs)
    outs = list(outs) if outs is not None else [None] * len(cfgs)
    check_tracker(log)  # before anything is written
    if len({batch_key(c) for c in cfgs}) > 1:
        raise SelectorLensError(
            "train_many needs runs with the same model, sequence length, batch size, clipping and device"
        )
    states = []
    try:
        for c, o in zip(cfgs, outs):
            states.append(_RunState(c, o, resume, progress and len(cfgs) == 1, restart, log))
        first, clip = cfgs[0].task.loss_start, cfgs[0].grad_clip
        active = [s for s in states if not s.done]
        with _CtrlC() as ctrl_c:
            _loop(active, first, clip, ctrl_c)
        for s in states:
            s.close()
        return [s.finish() for s in states]
    finally:  # the locks last until run.json says how each run ended
        for s in states:
            s.release()


def _loop(active: list, first: int, clip: float, ctrl_c: _CtrlC) -> None:
    """Step every active run until each is done (or Ctrl-C asks to stop: `_CtrlC`)."""
    while active:
        # one batched step per batch length (an epoch's last batch is short when D % batch
        # != 0); a run with hooks (ablated heads) steps on its own
        by_rows: dict[tuple, list] = {}
        for s in active:
            batch = s.next_batch()
            key = (len(batch), id(s) if s.hooks else None)
            by_rows.setdefault(key, []).append((s, batch))
        for members in by_rows.values():
            for s, _ in members:
                if s.noise and s.noise.due(s.step):  # ḡ at the parameters this step starts from
                    s.noise.refresh(s.model, s.step, s.batch_of, s.loss_of)
            losses = train_step(
                [s.model for s, _ in members],
                [s.opt for s, _ in members],
                torch.stack([b for _, b in members]),
                first,
                clip,
                members[0][0].hooks,
                compiled_losses() if members[0][0].cfg.compile else None,
                [s.noise for s, _ in members],
            )
            for (s, _), loss in zip(members, losses):
                s.after_step(loss)
        if ctrl_c.asked:
            for s in active:
                if not s.run.ckpt_path(s.step).is_file():
                    s.checkpoint(s.step)
                rundir.update(s.out, status=rundir.INTERRUPTED)
            raise KeyboardInterrupt
        active = [s for s in active if not s.done]


class _RunState:
    """One run inside the training loop: its model, optimizer, data order, log and checkpoints."""

    def __init__(
        self,
        cfg: TrainConfig,
        out,
        resume: bool,
        progress: bool,
        restart: bool = False,
        log: str | None = None,
    ):
        out = Path(out) if out is not None else Path("checkpoints") / cfg.name
        self.cfg, self.out, self.tracker = cfg, out, None
        self.lock = rundir.Lock(out)
        try:
            self._open(cfg, out, resume, progress, restart, log)
        except BaseException:
            self.lock.release()
            raise

    def _open(
        self, cfg: TrainConfig, out: Path, resume: bool, progress: bool, restart: bool, log
    ) -> None:
        self.run, has_state = _prepare(cfg, out, resume, restart)
        device = resolve_device(cfg.device)
        data = self.run.task_data
        self.task = cfg.task
        self.chash = config_hash(self.task, cfg.model)
        self.model = build_model(cfg.model, self.task, cfg.seed, device)
        self.opt = make_optimizer(cfg, self.model.parameters())
        self.eval_set = self.run.eval_set()  # a resumed run keeps the groups it recorded
        if getattr(self.task, "parity", None) == "paper":
            from selector_lens.model.adapter import rng_after_init
            from selector_lens.task.paper import PaperBatchOrder

            state = rng_after_init(cfg.model, self.task)
            self.order = PaperBatchOrder(self.task.n_examples, cfg.batch_size, state)
        else:
            self.order = BatchOrder(self.task.n_examples, cfg.batch_size, cfg.seed)
        self.tokens = data.tokens.to(device)
        self.device = device
        metrics_path = out / rundir.METRICS

        self.step, elapsed = 0, 0.0
        self.noise_state = None
        self.cadence = Cadence(cfg.eval_every, cfg.eval_cadence == "adaptive", headline(cfg.task))
        if has_state:
            self.step, elapsed = self._load_state(device)
            self.run.model_at(self.step, self.model)
            self.rows = [r for r in self.run.metric_rows() if r["step"] <= self.step]
            atomic_write_text(metrics_path, "".join(json.dumps(r) + "\n" for r in self.rows))
        else:
            self._refuse_lost_state()
            self.rows = []
            metrics_path.write_text("")
        # a branch's interventions (run.json "branch"), on the weights it starts from
        record = self.run.info.get(rundir.BRANCH) or {}
        heads = [parse_head(h, cfg.model) for h in record.get("freeze_heads", [])]
        self.frozen = frozen_slices(self.model, heads)
        self.z_mode = record.get("z")
        self.ablation = branch_ablation(self.run, record, cfg)
        none = torch.empty(0, dtype=torch.long)  # zero and mean act alike on every example
        hooks = self.ablation.hooks(none, 0) if self.ablation else []
        # on a copy: the attention kernel's output, which its backward reads, stays as it was
        self.hooks = [(name, lambda z, hook, fn=fn: fn(z.clone(), hook)) for name, fn in hooks]
        self.noise = None  # a branch's noise scale (`noise.NoiseScale`)
        if record.get("noise_scale") is not None:
            ref = record.get("noise_reference") or {}
            self.noise = NoiseScale(
                record["noise_scale"], self.task.n_examples, cfg.batch_size, cfg.seed, **ref
            )
            if self.noise_state:
                self.noise.load(self.noise_state)
        # the state checked: run.json takes this resume's budget and device, and says running
        rundir.update(out, config=cfg.to_dict(), status=rundir.RUNNING)
        self.streak = 0
        for r in self.rows:
            self.streak = self.streak + 1 if solved(cfg, r, self.rows[0]) else 0
        self.log = open(metrics_path, "a")
        self.tracker = open_tracker(log, self.run, cfg.options())
        self.t0 = time.perf_counter() - elapsed
        if not has_state:  # a state at step 0 already holds step 0's row and checkpoint
            groups = getattr(self.eval_set, "groups", None)  # the selector's evaluated groups
            if groups is not None:
                rundir.update(out, eval_groups=groups.tolist())
            self.evaluate(0)
            self.checkpoint(0)
        self.bar = _Progress(cfg, self.step) if progress else None
        self.model.train()
        self.stopped = (
            cfg.early_stop and self.streak >= cfg.early_stop_evals
        )  # resuming an early-stopped run

    def _load_state(self, device) -> tuple[int, float]:
        """The saved state (`read_state`), into this run's optimizer."""
        state = read_state(self.run.state_path, self.cfg, device, self.out)
        self.noise_state = state.get("noise")
        self.cadence.load(state.get("cadence"))
        try:
            self.opt.load_state_dict(state["optimizer"])
        except Exception as e:  # a state of another model shape
            raise SelectorLensError(
                f"corrupt checkpoint: {self.run.state_path} ({type(e).__name__})"
            ) from None
        return state["step"], state["elapsed"]

    def _refuse_lost_state(self) -> None:
        """No state, yet the run trained past step 0: resuming would silently start over."""
        trained = [s for s in self.run.steps if s > 0] + [
            r["step"] for r in self.run.metric_rows() if r["step"] > 0
        ]
        if trained:
            raise SelectorLensError(
                f"{self.run.state_path} is missing but {self.out} trained to step "
                f"{max(trained)}; pass --restart to train it again from step 0"
            )

    @property
    def done(self) -> bool:
        return self.stopped or self.step >= self.cfg.steps

    def next_batch(self) -> torch.Tensor:
        """Advance to the next step: set its learning rate, return its examples (a branch's
        `z` change applied)."""
        self.step += 1
        for group in self.opt.param_groups:
            group["lr"] = lr_at(self.cfg, self.step)
        return self.batch_of(self.order.indices(self.step), self.step)

    def batch_of(self, index: torch.Tensor, step: int) -> torch.Tensor:
        """The training examples at `index` as `step` trains on them (a branch's `z` change
        applied): the step's batch, and a noise-scaled branch's reference batch."""
        index = index.to(self.device)
        if self.z_mode:
            return without_z(self.tokens, index, self.task, self.z_mode, self.cfg.seed, step)
        return self.tokens[index]

    def loss_of(self, model, batch: torch.Tensor) -> torch.Tensor:
        """The training loss of `model` on `batch` [batch, pos] (the branch's ablated heads on)."""
        return target_losses([model], batch.unsqueeze(0), self.task.loss_start, self.hooks)[0]

    def after_step(self, loss: torch.Tensor) -> None:
        cfg, step = self.cfg, self.step
        with torch.no_grad():
            for p, head, value in self.frozen:  # a branch's frozen heads: no update at all
                p[head] = value
        last = step == cfg.steps
        self.cadence.observe(step, loss.item())
        counting = cfg.early_stop and self.streak > 0  # the stop reads every grid step
        if last or (step % cfg.eval_every == 0 and self.cadence.due(step, self.rows, counting)):
            row = self.evaluate(step)
            self.cadence.evaluated()
            self.stopped = cfg.early_stop and self.streak >= cfg.early_stop_evals
            if self.bar:
                self.bar.update(step, row)
        if step % cfg.ckpt_every == 0 or last or self.stopped:
            self.checkpoint(step)
        if self.bar and step % 10 == 0:
            self.bar.advance(step, self.cadence.last_loss)

    def evaluate(self, step: int) -> dict:
        started = time.perf_counter()
        self.model.eval()
        row = {
            "step": step,
            "examples_seen": self.order.examples_seen(step),
            "lr": lr_at(self.cfg, max(step, 1)),
        }
        row.update(evaluate(self.model, self.eval_set, intervention=self.ablation, task=self.task))
        if self.noise and step > 0:
            row.update(self.noise.row())
        if not math.isfinite(row["loss"]):  # diverged: a NaN row would poison every summary
            raise SelectorLensError(
                f"{self.out} diverged: loss {row['loss']} at step {step} (lr {self.cfg.lr}); "
                "its checkpoints up to the last finite evaluation are kept"
            )
        row["wall_s"] = time.perf_counter() - self.t0
        row["eval_s"] = row["wall_s"] + self.t0 - started  # what this evaluation cost
        self.model.train()
        self.log.write(json.dumps(row) + "\n")
        self.log.flush()
        if self.tracker:
            self.tracker.write(row)
        self.rows.append(row)
        self.streak = self.streak + 1 if solved(self.cfg, row, self.rows[0]) else 0
        return row

    def checkpoint(self, step: int) -> None:
        save_weights(self.model, self.run.ckpt_path(step), step, self.chash)
        state = {
            "step": step,
            "elapsed": time.perf_counter() - self.t0,
            "settings": _settings(self.cfg),
            "optimizer": self.opt.state_dict(),
        }
        if self.noise:
            state["noise"] = self.noise.state()
        state["cadence"] = self.cadence.state()
        state["checksum"] = _state_checksum(state)
        atomic_write(self.run.state_path, lambda tmp: torch.save(state, tmp))
        every = self.cfg.states_at
        if every and step % every == 0:  # kept: a branch can start here
            atomic_write(self.run.state_path_at(step), lambda tmp: torch.save(state, tmp))

    def close(self) -> None:
        if self.bar:
            self.bar.close()
            self.bar = None
        if self.tracker:
            self.tracker.close()
            self.tracker = None
        self.log.close()

    def release(self) -> None:
        """Close the log and give up the run's lock: after `finish`, or on an error."""
        self.close()
        self.lock.release()

    def finish(self) -> Run:
        summary = {
            **task_summary(self.task, self.rows),
            "wall_time_s": time.perf_counter() - self.t0,
        }
        rundir.finish(self.out, self.stopped, summary)
        return self.run
