"""The training loop: AdamW, clipping, dense evaluation, atomic checkpoints, exact resume.

Nothing random happens after initialisation except the data order, and that is a pure
function of (seed, epoch), so a resumed run replays the same batches without saving RNG state.
"""

from __future__ import annotations

import datetime
import json
import math
import time
from pathlib import Path

import torch

from . import __version__
from .config import TrainConfig
from .errors import SelectorLensError
from .metrics import evaluate, make_eval_set
from .model import atomic_write, build_model, config_hash, save_weights
from .runs import Run, write_json
from .transition import summarize


def resolve_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise SelectorLensError("--device cuda asked for, but no CUDA device is available")
    return name


class BatchOrder:
    """Step -> example indices: each epoch is a fresh permutation seeded by (seed, epoch)."""

    def __init__(self, n_examples: int, batch_size: int, seed: int):
        self.n, self.b, self.seed = n_examples, batch_size, seed
        self.per_epoch = math.ceil(n_examples / batch_size)
        self._epoch, self._perm = -1, None

    def indices(self, step: int) -> torch.Tensor:
        """Examples of optimizer step `step` (1-based)."""
        epoch, j = divmod(step - 1, self.per_epoch)
        if epoch != self._epoch:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._epoch, self._perm = epoch, torch.randperm(self.n, generator=g)
        return self._perm[j * self.b : (j + 1) * self.b]

    def examples_seen(self, step: int) -> int:
        epoch, j = divmod(step, self.per_epoch)
        return epoch * self.n + min(j * self.b, self.n)


def lr_at(cfg: TrainConfig, step: int) -> float:
    """Learning rate for optimizer step `step` (1-based): linear warmup, then constant or cosine."""
    if step <= cfg.warmup_steps:
        return cfg.lr * step / cfg.warmup_steps
    if cfg.schedule == "cosine":
        frac = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
        return cfg.lr * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))
    return cfg.lr


def train_step(model, opt, batch: torch.Tensor, first: int, grad_clip: float) -> torch.Tensor:
    """One AdamW step on next-token cross-entropy over the target tokens and EOS only."""
    logits = model(batch)[:, first:-1]
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, first + 1 :].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
    return loss.detach()


def solved(cfg: TrainConfig, row: dict) -> bool:
    """Is this eval below the early-stop line (see TrainConfig)?"""
    task = cfg.task
    if task.direction == "b_to_a":
        return False
    if task.has_candidates:
        return task.k > 1 and row["candidate_loss"] < cfg.early_stop_frac * task.log_k
    return row["loss"] < cfg.early_stop_frac


def _prepare(cfg: TrainConfig, out: Path, resume: bool) -> tuple[Run, bool]:
    """Create the run directory, or check that it holds this run when resuming."""
    run = Run(out)
    exists = (out / "run.json").is_file()
    if exists:
        old = Run.open(out).config
        diff = old.differences(cfg)
        if diff:
            raise SelectorLensError(f"{out} holds a different run ({'; '.join(diff[:3])}); choose another --out")
        if not resume:
            raise SelectorLensError(f"{out} already holds this run; pass --resume to continue it or choose another --out")
        info = run.info
        info["config"] = cfg.to_dict()  # steps may have been extended
        info["status"] = "running"
        write_json(out / "run.json", info)
        return run, run.state_path.is_file()
    if out.exists() and any(out.iterdir()):
        raise SelectorLensError(f"{out} exists and is not a run directory; choose another --out")
    run.ckpt_dir.mkdir(parents=True, exist_ok=True)
    data = cfg.task.generate()
    write_json(out / "data.json", data.to_json())
    write_json(
        out / "run.json",
        {
            "config": cfg.to_dict(),
            "version": __version__,
            "seed": cfg.seed,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "status": "running",
        },
    )
    return run, False


def train(cfg: TrainConfig, out=None, resume: bool = False, progress: bool = False) -> Run:
    """Train (or resume) one run and return it. `out` defaults to checkpoints/<cfg.name>."""
    out = Path(out) if out is not None else Path("checkpoints") / cfg.name
    run, has_state = _prepare(cfg, out, resume)
    device = resolve_device(cfg.device)
    data = run.task_data
    task = cfg.task
    chash = config_hash(task, cfg.model)

    model = build_model(cfg.model, task, cfg.seed, device)
    opt = torch.optim.AdamW(
        model.parameters(), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay
    )
    eval_set = make_eval_set(data, cfg.eval_groups, seed=cfg.seed)
    order = BatchOrder(task.n_examples, cfg.batch_size, cfg.seed)
    tokens = data.tokens.to(device)
    metrics_path = out / "metrics.jsonl"

    step, elapsed = 0, 0.0
    if has_state:
        try:
            state = torch.load(run.state_path, map_location=device, weights_only=False)
            step, elapsed = state["step"], state["elapsed"]
            opt.load_state_dict(state["optimizer"])
        except Exception as e:  # torn or foreign file: name it
            raise SelectorLensError(f"corrupt checkpoint: {run.state_path} ({type(e).__name__})") from None
        run.model_at(step, model)
        rows = [r for r in run.metric_rows() if r["step"] <= step]
        atomic_write(metrics_path, lambda tmp: tmp.write_text("".join(json.dumps(r) + "\n" for r in rows)))
    else:
        rows = []
        metrics_path.write_text("")
    streak = 0
    for r in rows:
        streak = streak + 1 if solved(cfg, r) else 0

    with open(metrics_path, "a") as log:
        t0 = time.perf_counter() - elapsed

        def do_eval(step: int):
            nonlocal streak
            model.eval()
            row = {"step": step, "examples_seen": order.examples_seen(step), "lr": lr_at(cfg, max(step, 1))}
            row.update(evaluate(model, eval_set))
            row["wall_s"] = time.perf_counter() - t0
            model.train()
            log.write(json.dumps(row) + "\n")
            log.flush()
            rows.append(row)
            streak = streak + 1 if solved(cfg, row) else 0
            return row

        def do_ckpt(step: int):
            save_weights(model, run.ckpt_path(step), step, chash)
            state = {"step": step, "elapsed": time.perf_counter() - t0, "optimizer": opt.state_dict()}
            atomic_write(run.state_path, lambda tmp: torch.save(state, tmp))

        if step == 0:
            info = run.info
            info["eval_groups"] = eval_set.groups.tolist()
            write_json(out / "run.json", info)
            do_eval(0)
            do_ckpt(0)

        bar = _Progress(cfg, step) if progress else None
        model.train()
        stopped = cfg.early_stop and streak >= cfg.early_stop_evals  # resuming an early-stopped run
        while step < cfg.steps and not stopped:
            step += 1
            for group in opt.param_groups:
                group["lr"] = lr_at(cfg, step)
            loss = train_step(model, opt, tokens[order.indices(step).to(device)], task.first_target_pos, cfg.grad_clip)
            last = step == cfg.steps
            if step % cfg.eval_every == 0 or last:
                row = do_eval(step)
                stopped = cfg.early_stop and streak >= cfg.early_stop_evals
                if bar:
                    bar.update(step, row)
            if step % cfg.ckpt_every == 0 or last or stopped:
                do_ckpt(step)
            if bar and step % 10 == 0:
                bar.advance(step, loss.item())
        if bar:
            bar.close()

    info = run.info
    info["status"] = "early_stopped" if stopped else "finished"
    info["summary"] = {**summarize(rows, task.log_k), "wall_time_s": time.perf_counter() - t0}
    write_json(out / "run.json", info)
    return run


class _Progress:
    """A rich progress bar: step, train loss, candidate loss against log K."""

    def __init__(self, cfg: TrainConfig, start: int):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.log_k = cfg.task.log_k
        self.p = Progress(
            TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
            TextColumn("{task.fields[info]}"),
        )
        self.p.start()
        self.loss, self.cand = float("nan"), "-"
        self.t = self.p.add_task("train", total=cfg.steps, completed=start, info="")

    def advance(self, step: int, loss: float):
        self.loss = loss
        self._show(step)

    def update(self, step: int, row: dict):
        c = row.get("candidate_loss")
        self.cand = "-" if c is None else f"{c:.3f} (log K {self.log_k:.3f})"
        self._show(step)

    def _show(self, step: int):
        self.p.update(self.t, completed=step, info=f"loss {self.loss:.3f}  cand {self.cand}")

    def close(self):
        self.p.stop()
