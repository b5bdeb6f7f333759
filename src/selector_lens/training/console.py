"""What the training loop shows and hears at the console: the progress bar (or plain lines
away from a terminal) and Ctrl-C as a request to stop cleanly."""

from __future__ import annotations

import math
import sys

from selector_lens.config import TrainConfig


class _CtrlC:
    """Ctrl-C during training asks to stop: the step under way ends, every run is checkpointed
    there (weights and state) and marked interrupted, then KeyboardInterrupt is raised; nothing
    is lost and `--resume` continues exactly. A second Ctrl-C stops at once. Outside the main
    thread (where signals cannot be caught) Ctrl-C acts as usual."""

    def __enter__(self):
        import signal
        import threading

        self.asked, self.old = False, None
        if threading.current_thread() is threading.main_thread():
            self.old = signal.signal(signal.SIGINT, self._ask)
        return self

    def _ask(self, signum, frame):
        if self.asked:
            raise KeyboardInterrupt
        self.asked = True

    def __exit__(self, *exc):
        import signal

        if self.old is not None:
            signal.signal(signal.SIGINT, self.old)
        return False


class _Progress:
    """A rich progress bar: step, train loss, and the selector's candidate loss against log K
    (another task: its headline metric)."""

    def __init__(self, cfg: TrainConfig, start: int):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        from selector_lens.task.protocol import headline

        self.log_k = getattr(cfg.task, "log_k", None)  # the selector's candidate loss
        self.headline = None if cfg.task.name == "selector" else headline(cfg.task)
        self.p = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[info]}"),
        )
        self.p.start()
        self.loss, self.cand = float("nan"), "-"
        self.t = self.p.add_task("train", total=cfg.steps, completed=start, info="")
        # where no bar can draw (a pipe, nohup, CI): a plain line at every 5% of the steps
        self.lines = not self.p.console.is_terminal
        self.total, self.every = cfg.steps, max(1, cfg.steps // 20)
        self.next_line = (start // self.every + 1) * self.every

    def advance(self, step: int, loss: float):
        self.loss = loss
        self._show(step)

    def update(self, step: int, row: dict):
        if self.headline is not None:
            v = row.get(self.headline)
            self.cand = "-" if not isinstance(v, (int, float)) else f"{v:.3f}"
        else:
            c = row.get("candidate_loss")
            self.cand = "-" if c is None else f"{c:.3f} (log K {self.log_k:.3f})"
        self._show(step)

    def _show(self, step: int):
        loss = "-" if math.isnan(self.loss) else f"{self.loss:.3f}"
        info = f"loss {loss}  {self.headline or 'cand'} {self.cand}"
        self.p.update(self.t, completed=step, info=info)
        if self.lines and step >= self.next_line:
            print(f"train: step {step}/{self.total}  {info}", file=sys.stderr, flush=True)
            self.next_line = (step // self.every + 1) * self.every

    def close(self):
        self.p.stop()
