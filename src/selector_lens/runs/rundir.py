"""The run directory's one owner: its file names, its statuses, and every write to run.json and
error.json (docs/design.md: the run directory). No torch, so reading a run's state stays cheap.

The trainer, the importer, the sweep and the studies create, finish and check runs only through
these functions; `runs.Run` reads what they wrote.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path

from selector_lens.errors import SelectorLensError
from selector_lens.files import read_json, write_json

RUN_JSON = "run.json"
DATA_JSON = "data.json"
METRICS = "metrics.jsonl"
METRICS_PACKED = "metrics.jsonl.gz"  # a published run's log
CLOCK = ("wall_s", "eval_s")  # a metrics row's timings: never part of what must match
ERROR_JSON = "error.json"
CKPT_DIR = "ckpt"
BRANCH = "branch"  # run.json: where a branch came from (parent, step) and what it changed
STATE = "last.pt"  # optimizer state of the last checkpoint: what resuming needs beyond weights
LOCK = ".training.lock"  # held (flock) by the process training the run

RUNNING, FINISHED, EARLY_STOPPED = "running", "finished", "early_stopped"
INTERRUPTED = "interrupted"  # Ctrl-C: its state at the step it stopped is saved; --resume
DONE = (FINISHED, EARLY_STOPPED)


def is_run(path) -> bool:
    return (Path(path) / RUN_JSON).is_file()


def status(path) -> str:
    return read_json(Path(path) / RUN_JSON).get("status", "unknown")


def is_done(path, steps: int | None = None) -> bool:
    """Has this run ended (trained to its budget or stopped early)? A sweep skips it, a study
    reads it, `publish` copies it. Given `steps`, a run that used up a smaller budget is not
    done: the budget grew, and a sweep trains it on from its last checkpoint."""
    if not is_run(path):
        return False
    info = read_json(Path(path) / RUN_JSON)
    if info.get("status") not in DONE:
        return False
    used_up = info["status"] == FINISHED and info["config"]["steps"] < (steps or 0)
    return not used_up


def require_free(path) -> None:
    """One clear error when `path` holds something other than nothing (a run goes nowhere else).
    What a creation killed before its run.json left (the lock, data.json, an empty ckpt/)
    counts as nothing: `create` writes run.json last."""
    path = Path(path)

    def ours(p: Path) -> bool:
        if p.name == CKPT_DIR and p.is_dir():
            return not any(p.iterdir())
        return p.name in (LOCK, DATA_JSON, f".{DATA_JSON}.tmp")

    if path.exists() and not all(ours(p) for p in path.iterdir()):
        raise SelectorLensError(f"{path} exists and is not a run directory; choose another --out")


class Lock:
    """`path` locked (flock on `path/name`, which dies with the process) until `release`, which
    also removes the file. Two processes training one run (two studies over one root) would
    interleave its log and checkpoints: the second gets an error instead, or waits (`wait`)."""

    def __init__(
        self,
        path,
        name: str = LOCK,
        busy: str = "is being trained by another process",
        wait: bool = False,
    ):
        import fcntl

        self.file = Path(path) / name
        self.file.parent.mkdir(parents=True, exist_ok=True)
        while True:
            f = open(self.file, "a+")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                f.seek(0)
                pid = f.read().strip()
                f.close()
                raise SelectorLensError(
                    f"{path} {busy}{f' (pid {pid})' if pid else ''}; "
                    "wait for it to end or choose another directory"
                ) from None
            try:  # the holder we waited on may have removed the file: lock the one on disk
                if os.stat(self.file).st_ino == os.fstat(f.fileno()).st_ino:
                    break
            except FileNotFoundError:
                pass
            f.close()
        f.truncate(0)
        f.write(str(os.getpid()))
        f.flush()
        self.handle = f

    def release(self) -> None:
        if not self.handle.closed:
            self.file.unlink(missing_ok=True)
            self.handle.close()


def create(path, config: dict, version: str, data: dict, **extra) -> None:
    """A new run: `ckpt/`, the exact dataset (`data.json`) and `run.json` with status running."""
    path = Path(path)
    require_free(path)
    (path / CKPT_DIR).mkdir(parents=True, exist_ok=True)
    write_json(path / DATA_JSON, data)
    created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    write_json(
        path / RUN_JSON,
        {
            "config": config,
            "version": version,
            "seed": config["seed"],
            "created": created,
            "status": RUNNING,
            **extra,
        },
    )


def update(path, **fields) -> dict:
    """Set fields of run.json (atomically); returns the new contents."""
    info = {**read_json(Path(path) / RUN_JSON), **fields}
    write_json(Path(path) / RUN_JSON, info)
    return info


def finish(path, early_stopped: bool, summary: dict) -> None:
    update(path, status=EARLY_STOPPED if early_stopped else FINISHED, summary=summary)


def write_error(path, error: dict) -> None:
    """Record why a run failed (a sweep goes on without it); `clear_error` once it succeeds."""
    Path(path).mkdir(parents=True, exist_ok=True)
    write_json(Path(path) / ERROR_JSON, error)


def clear_error(path) -> None:
    (Path(path) / ERROR_JSON).unlink(missing_ok=True)


def read_error(path) -> str | None:
    err = Path(path) / ERROR_JSON
    return read_json(err)["error"] if err.is_file() else None
