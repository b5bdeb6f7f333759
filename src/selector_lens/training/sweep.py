"""Sweeps: a grid over training options, one ordinary run directory per point.

A spec (YAML or dict) names fixed options (`base`) and a grid (`grid`); option names are
`config.OPTIONS`, the same as `selector-lens train`'s (`k`, `n_bases`, `n_layers`, `lr`, ...), plus
`D`, which sets n_bases = round(D / k). The sweep directory holds `sweep.json` (the spec and its
points) and one run directory per point; finished runs are skipped (those that used up a budget
since raised are trained on), killed ones resumed, failed ones recorded in their `error.json`
without stopping the others.

Executors: `local` (a process pool; torch threads per run = cores / workers), `ray` (the same
jobs as Ray tasks; without an address a local Ray instance, with one a cluster: the sweep
directory must then be on storage every node sees) and `batched` (one process trains the points
that share a model shape and batch size together, as one batched model: `training.trainer.train_many`;
the way to fill one GPU with a sweep's small models, `--device cuda`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

from selector_lens.config import coerce, from_options
from selector_lens.errors import SelectorLensError
from selector_lens.fields import label
from selector_lens.files import atomic_write_text
from selector_lens.runs import rundir

EXECUTORS = ("local", "ray", "batched")
SWEEP_LOCK = ".sweep.lock"  # held (flock) by the process running a sweep directory
MAX_SPEC_CHARS = 65_536  # a spec is a few lines; anything larger is a mistake or an attack
MAX_POINTS = 10_000


def _safe_yaml(text: str, what: str):
    """YAML without aliases (an alias bomb grows a few hundred bytes into gigabytes)."""
    import yaml

    try:
        if any(isinstance(e, yaml.AliasEvent) for e in yaml.parse(text, Loader=yaml.SafeLoader)):
            raise SelectorLensError(f"{what} uses a YAML alias (*name); write the values out")
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SelectorLensError(f"{what} is not valid YAML ({e})".replace("\n", " ")) from None


BRANCH_CHANGES = ("reset_adam", "freeze_heads", "reinit_heads", "ablate_heads", "ablate_mode", "z")


@dataclass(frozen=True)
class SweepSpec:
    """`base` and `grid` of training options; with `branch` ({from: RUN, step: S}), every point
    is a branch of that run at that step, and base and grid may also set a branch's changes
    (`BRANCH_CHANGES`: reset_adam, freeze_heads, ablate_heads, z, ...)."""

    base: dict
    grid: dict
    branch: dict | None = None

    @classmethod
    def load(cls, path) -> SweepSpec:
        try:
            text = Path(path).read_text()
        except FileNotFoundError:
            raise SelectorLensError(f"missing sweep spec: {path}") from None
        except (OSError, UnicodeDecodeError) as e:
            raise SelectorLensError(f"cannot read sweep spec {path} ({e})") from None
        if len(text) > MAX_SPEC_CHARS:
            raise SelectorLensError(
                f"sweep spec {path} has {len(text):,} characters; a spec is at most "
                f"{MAX_SPEC_CHARS:,}"
            )
        raw = _safe_yaml(text, f"sweep spec {path}")
        if not isinstance(raw, dict):
            raise SelectorLensError(f"sweep spec {path} must be a mapping with base and grid")
        return cls.from_dict(raw)

    @classmethod
    def from_dict(cls, raw: dict) -> SweepSpec:
        extra = set(raw) - {"base", "grid", "branch"}
        if extra:
            raise SelectorLensError(
                f"a sweep spec has keys base, grid and branch, not {', '.join(sorted(extra))}"
            )
        branch = raw.get("branch")
        if branch is not None and (
            not isinstance(branch, dict)
            or set(branch) != {"from", "step"}
            or not isinstance(branch["step"], int)
        ):
            raise SelectorLensError(
                "a sweep spec's branch is {from: RUN, step: STEP} (a step with a kept state)"
            )
        base, grid = raw.get("base") or {}, raw.get("grid") or {}
        if not isinstance(base, dict) or not isinstance(grid, dict):
            raise SelectorLensError("a sweep spec's base and grid map option names to values")
        grid = {k: (v if isinstance(v, list) else [v]) for k, v in grid.items()}
        if any(len(v) == 0 for v in grid.values()):
            raise SelectorLensError("every grid option needs at least one value")
        empty = [label(k) for k, v in base.items() if v is None]
        empty += [label(k) for k, vs in grid.items() if any(v is None for v in vs)]
        if empty:  # a null would silently mean the default
            raise SelectorLensError(
                f"sweep spec: {', '.join(empty)} has an empty value (null); give one or leave it out"
            )
        return cls(dict(base), grid, branch)

    def with_grid(self, pairs: list[str]) -> SweepSpec:
        """The spec with grid options set from `key=v1,v2,...` strings (the CLI's --grid)."""
        grid = dict(self.grid)
        for pair in pairs:
            key, sep, values = pair.partition("=")
            if not sep or not key or not values:
                raise SelectorLensError(f"--grid takes key=v1,v2,..., got {pair!r}")
            grid[key.strip()] = [_safe_yaml(v, f"--grid {key}") for v in values.split(",")]
        return SweepSpec.from_dict({"base": self.base, "grid": grid, "branch": self.branch})

    def points(self) -> list[dict]:
        """The grid's points (base options updated by each combination), validated."""
        count = math.prod(len(v) for v in self.grid.values())
        if count > MAX_POINTS:
            raise SelectorLensError(
                f"the grid has {count:,} points; a sweep has at most {MAX_POINTS:,}"
            )
        keys = list(self.grid)
        pts = [
            coerce({**self.base, **dict(zip(keys, combo))})
            for combo in itertools.product(*self.grid.values())
        ]
        for p in pts:  # one clear error before anything runs
            from_options({k: v for k, v in p.items() if k not in BRANCH_CHANGES})
            if not self.branch and set(p) & set(BRANCH_CHANGES):
                raise SelectorLensError(
                    f"{', '.join(sorted(set(p) & set(BRANCH_CHANGES)))} needs a branch: block"
                )
        return pts

    def make_branches(self, points: list[dict], outs: list[Path]) -> list[dict]:
        """Each point as a branch of `branch["from"]` at `branch["step"]` (made once: a
        resumed sweep finds them), and the options its run trains with."""
        from selector_lens.runs.run import Run
        from selector_lens.training.branch import Changes, make_branch

        parent = Run.open(self.branch["from"])
        options = []
        for p, out in zip(points, outs):
            if not rundir.is_run(out):
                kw = {
                    k: _as_heads(v) if k.endswith("_heads") else v
                    for k, v in p.items()
                    if k in BRANCH_CHANGES
                }
                change = {k: v for k, v in p.items() if k not in BRANCH_CHANGES}
                make_branch(parent, self.branch["step"], out, Changes(options=change, **kw))
            options.append(Run.open(out).config.options())
        return options

    def run_name(self, point: dict) -> str:
        """The directory name from the grid's options, in grid order (those that vary, and k,
        n_bases, D, seed always): `k5-D2000`, `a_to_b-seed1`, `lr0.003-batch_size64`."""
        parts = []
        for key in self.grid:
            if len(self.grid[key]) > 1 or key in ("k", "n_bases", "D", "seed"):
                parts.append(_name_part(key, point[key]))
        return "-".join(parts) or "run"


def _as_heads(value) -> tuple:
    """A spec's heads: 'L0H3' or [L0H3, L1H0]."""
    return (value,) if isinstance(value, str) else tuple(value)


def _name_part(key: str, value) -> str:
    if isinstance(value, (list, tuple)):
        return "-".join(str(v) for v in value) or f"no_{key}"
    if isinstance(value, bool):
        return key if value else f"no_{key}"
    if isinstance(value, str):
        return value  # directions, devices, 'all': the value says what it is
    return f"{key}{value:g}" if isinstance(value, float) else f"{key}{value}"


def worker_threads(cores: int, workers: int) -> int:
    """Torch threads per worker: the cores shared out, capped by OMP_NUM_THREADS when the user
    set it (a sweep beside other work: more threads than cores free spin against each other)."""
    threads = max(1, cores // workers)
    cap = os.environ.get("OMP_NUM_THREADS", "")
    return min(threads, max(1, int(cap))) if cap.isdigit() else threads


def trained(options: dict, out) -> bool:
    """Has the run at `out` ended within the budget `options` ask for? (A finished run whose
    budget has since grown is trained on from its last checkpoint.)"""
    return rundir.is_done(out, from_options(options).steps)


def run_point(options: dict, out: str, threads: int) -> dict:
    """Train one point (or resume it) on `threads` threads (the caller's count is restored);
    never raises: the outcome is returned and recorded."""
    import torch

    from selector_lens.training.trainer import train

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        if trained(options, out):
            return {"run": out, "outcome": "skipped"}
        run = train(from_options(options), out=Path(out), resume=True)
        rundir.clear_error(out)
        return {"run": out, "outcome": "done", "tau": run.tau()}
    except Exception as e:  # recorded, and the sweep goes on
        err = {
            "run": out,
            "outcome": "failed",
            "error": f"{type(e).__name__}: {e}",
            "traceback": traceback.format_exc(),
        }
        rundir.write_error(out, err)
        return err
    finally:
        torch.set_num_threads(before)


def run_sweep(
    spec: SweepSpec,
    root,
    executor: str = "local",
    workers: int | None = None,
    address: str | None = None,
    progress: bool = False,
    wait: bool = False,
) -> list[dict]:
    """Run every point of `spec` under `root`; returns one outcome per point. One sweep at a
    time per directory: a second is refused, or waits for the first with `wait`."""
    if executor not in EXECUTORS:
        raise SelectorLensError(
            f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}"
        )
    points = spec.points()
    root = Path(root).resolve()  # every executor's workers see the same paths (Ray's cwd differs)
    names = [spec.run_name(p) for p in points]
    if len(set(names)) != len(names):
        raise SelectorLensError(
            "two grid points map to the same run name; vary fewer options at once"
        )
    record = {
        "base": spec.base,
        "grid": spec.grid,
        "points": [{"name": n, "options": p} for n, p in zip(names, points)],
    }
    if spec.branch:
        record["branch"] = spec.branch
    sweep_json = root / "sweep.json"
    if sweep_json.is_file() and json.loads(sweep_json.read_text())["points"] != record["points"]:
        raise SelectorLensError(f"{root} holds a different sweep; choose another directory")
    lock = rundir.Lock(root, SWEEP_LOCK, "is being swept by another process", wait)
    try:
        atomic_write_text(sweep_json, json.dumps(record, indent=1))
        if spec.branch:
            points = spec.make_branches(points, [root / n for n in names])
        jobs = [(p, str(root / n)) for p, n in zip(points, names)]
        return run_jobs(jobs, executor, workers, address, progress)
    finally:
        lock.release()


def run_jobs(
    jobs: list[tuple[dict, str]],
    executor: str = "local",
    workers: int | None = None,
    address: str | None = None,
    progress: bool = False,
) -> list[dict]:
    """Train (or resume, or skip when finished) each (options, run directory); in this order
    as workers free up. Returns one outcome per job."""
    if executor not in EXECUTORS:
        raise SelectorLensError(
            f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}"
        )
    jobs = [(p, str(Path(out).resolve())) for p, out in jobs]
    if executor == "batched":  # one process; `workers` caps the runs per batched model
        return _run_batched(jobs, workers, progress)
    cores = os.cpu_count() or 1
    workers = max(1, min(workers or cores, len(jobs)))
    threads = worker_threads(cores, workers)
    if executor == "ray":
        return _run_ray(jobs, threads, address, progress)
    return _run_local(jobs, workers, threads, progress)


class _Board:
    """done / running / failed counts, as a rich progress bar."""

    def __init__(self, total: int, show: bool):
        self.p = None
        if show:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self.p = Progress(
                TextColumn("[bold]sweep"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[info]}"),
                console=Console(stderr=True),
            )
            self.p.start()
            self.t = self.p.add_task("sweep", total=total, info="")
        self.total, self.results = total, []

    def add(self, result: dict, running: int):
        self.results.append(result)
        if self.p:
            failed = sum(r["outcome"] == "failed" for r in self.results)
            self.p.update(
                self.t, completed=len(self.results), info=f"running {running}  failed {failed}"
            )

    def close(self):
        if self.p:
            self.p.stop()


def _exit_with_parent(parent: int) -> None:
    """Pool initializer: end this worker when the sweep process dies, so a killed sweep leaves
    no orphan still writing into a run directory that a resumed sweep is about to reopen."""
    import threading
    import time

    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _run_local(jobs, workers: int, threads: int, progress: bool) -> list[dict]:
    """A process pool over the jobs. A worker that dies (killed, out of memory) breaks the pool
    for every job then running: those are run again one at a time, each in a pool of its own
    (resuming from its checkpoints), so only a point that kills its worker again fails."""
    board = _Board(len(jobs), progress)
    for job in _pool_round(jobs, workers, threads, board):
        for _, out in _pool_round([job], 1, threads, board):
            board.add(_record_crash(out), 0)
    board.close()
    return sorted(board.results, key=lambda r: r["run"])


def _pool_round(jobs, workers: int, threads: int, board) -> list:
    """Run `jobs` in one pool; returns those whose worker died (a broken pool)."""
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool
    from multiprocessing import get_context

    crashed = []
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=get_context("spawn"),
        initializer=_exit_with_parent,
        initargs=(os.getpid(),),
    ) as pool:
        futures = {pool.submit(run_point, p, out, threads): (p, out) for p, out in jobs}
        pending = len(futures)
        for fut in as_completed(futures):
            pending -= 1
            try:
                board.add(fut.result(), min(workers, pending))
            except BrokenProcessPool:
                crashed.append(futures[fut])
    return crashed


def _record_crash(out: str, why: str = "its worker process died twice (killed or out of memory)"):
    err = {"run": out, "outcome": "failed", "error": f"WorkerDied: {why}", "traceback": ""}
    Path(out).mkdir(parents=True, exist_ok=True)
    rundir.write_error(out, err)
    return err


def _run_batched(jobs, per_batch: int | None, progress: bool) -> list[dict]:
    """Train compatible points together (`train_many`), at most `per_batch` at a time (default:
    all). A group that fails is retried point by point, so one bad point fails alone."""
    from selector_lens.training.trainer import batch_key, train_many

    board = _Board(len(jobs), progress)
    todo = []
    for p, out in jobs:
        if trained(p, out):
            board.add({"run": out, "outcome": "skipped"}, 0)
        else:
            todo.append((from_options(p), p, out))
    groups: dict = {}
    for cfg, p, out in todo:
        groups.setdefault(batch_key(cfg), []).append((cfg, p, out))
    for members in groups.values():
        size = per_batch or len(members)
        for i in range(0, len(members), size):
            part = members[i : i + size]
            try:
                runs = train_many([c for c, _, _ in part], [out for _, _, out in part], resume=True)
                for run, (_, _, out) in zip(runs, part):
                    rundir.clear_error(out)
                    board.add({"run": out, "outcome": "done", "tau": run.tau()}, 0)
            except Exception:
                for _, p, out in part:
                    board.add(run_point(p, out, os.cpu_count() or 1), 0)
    board.close()
    return sorted(board.results, key=lambda r: r["run"])


def _run_ray(jobs, threads: int, address: str | None, progress: bool) -> list[dict]:
    try:
        import ray
    except ImportError:
        raise SelectorLensError(
            "the ray executor needs Ray: pip install 'selector-lens[ray]'"
        ) from None
    with _stdout_to_stderr():  # Ray's own messages (a worker died...) never reach stdout
        return _ray_jobs(ray, jobs, threads, address, progress)


@contextlib.contextmanager
def _stdout_to_stderr():
    """File descriptor 1 pointed at stderr for a while: what this process and the processes it
    starts print goes there, so a command's --json output stays parseable."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _ray_jobs(ray, jobs, threads: int, address: str | None, progress: bool) -> list[dict]:
    started = not ray.is_initialized()
    if started:
        ray.init(
            address=address,
            num_cpus=None if address else os.cpu_count(),
            include_dashboard=False,
            log_to_driver=False,
        )
    try:
        remote = ray.remote(num_cpus=threads)(run_point)  # Ray retries a task whose worker died
        outs = {remote.remote(p, out, threads): out for p, out in jobs}
        refs = list(outs)
        board = _Board(len(jobs), progress)
        while refs:
            done, refs = ray.wait(refs, num_returns=1)
            try:
                result = ray.get(done[0])
            except Exception as e:  # the worker died on every retry: this point fails alone
                result = _record_crash(outs[done[0]], f"{type(e).__name__}: {e}".splitlines()[0])
            board.add(result, len(refs))
        board.close()
        return sorted(board.results, key=lambda r: r["run"])
    finally:
        if started:
            ray.shutdown()
