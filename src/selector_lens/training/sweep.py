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
that share a model shape and batch size together, as one batched model: `trainer.train_many`;
the way to fill one GPU with a sweep's small models, `--device cuda`).
"""

from __future__ import annotations

import itertools
import json
import os
import traceback
from dataclasses import dataclass, replace
from pathlib import Path

from selector_lens.config import coerce, from_options
from selector_lens.errors import SelectorLensError
from selector_lens.runs import rundir

EXECUTORS = ("local", "ray", "batched")


@dataclass(frozen=True)
class SweepSpec:
    base: dict
    grid: dict

    @classmethod
    def load(cls, path) -> SweepSpec:
        import yaml

        try:
            raw = yaml.safe_load(Path(path).read_text()) or {}
        except FileNotFoundError:
            raise SelectorLensError(f"missing sweep spec: {path}") from None
        except yaml.YAMLError as e:
            raise SelectorLensError(f"sweep spec {path} is not valid YAML ({e})") from None
        return cls.from_dict(raw)

    @classmethod
    def from_dict(cls, raw: dict) -> SweepSpec:
        extra = set(raw) - {"base", "grid"}
        if extra:
            raise SelectorLensError(
                f"a sweep spec has keys base and grid, not {', '.join(sorted(extra))}"
            )
        grid = {k: (v if isinstance(v, list) else [v]) for k, v in (raw.get("grid") or {}).items()}
        if any(len(v) == 0 for v in grid.values()):
            raise SelectorLensError("every grid option needs at least one value")
        return cls(dict(raw.get("base") or {}), grid)

    def with_grid(self, pairs: list[str]) -> SweepSpec:
        """The spec with grid options set from `key=v1,v2,...` strings (the CLI's --grid)."""
        import yaml

        grid = dict(self.grid)
        for pair in pairs:
            key, sep, values = pair.partition("=")
            if not sep or not key or not values:
                raise SelectorLensError(f"--grid takes key=v1,v2,..., got {pair!r}")
            grid[key.strip()] = [yaml.safe_load(v) for v in values.split(",")]
        return replace(self, grid=grid)

    def points(self) -> list[dict]:
        """The grid's points (base options updated by each combination), validated."""
        keys = list(self.grid)
        pts = [
            coerce({**self.base, **dict(zip(keys, combo))})
            for combo in itertools.product(*self.grid.values())
        ]
        for p in pts:
            from_options(p)  # one clear error before anything runs
        return pts

    def run_name(self, point: dict) -> str:
        """The directory name from the grid's options, in grid order (those that vary, and k,
        n_bases, D, seed always): `k5-D2000`, `a_to_b-seed1`, `lr0.003-batch_size64`."""
        parts = []
        for key in self.grid:
            if len(self.grid[key]) > 1 or key in ("k", "n_bases", "D", "seed"):
                parts.append(_name_part(key, point[key]))
        return "-".join(parts) or "run"


def _name_part(key: str, value) -> str:
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
) -> list[dict]:
    """Run every point of `spec` under `root`; returns one outcome per point."""
    if executor not in EXECUTORS:
        raise SelectorLensError(
            f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}"
        )
    points = spec.points()
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
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
    sweep_json = root / "sweep.json"
    if sweep_json.is_file() and json.loads(sweep_json.read_text())["points"] != record["points"]:
        raise SelectorLensError(f"{root} holds a different sweep; choose another directory")
    sweep_json.write_text(json.dumps(record, indent=1))
    return run_jobs(
        [(p, str(root / n)) for p, n in zip(points, names)], executor, workers, address, progress
    )


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
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from multiprocessing import get_context

    board = _Board(len(jobs), progress)
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=get_context("spawn"),
        initializer=_exit_with_parent,
        initargs=(os.getpid(),),
    ) as pool:
        futures = [pool.submit(run_point, p, out, threads) for p, out in jobs]
        pending = len(futures)
        for fut in as_completed(futures):
            pending -= 1
            board.add(fut.result(), min(workers, pending))
    board.close()
    return sorted(board.results, key=lambda r: r["run"])


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
    started = not ray.is_initialized()
    if started:
        ray.init(
            address=address,
            num_cpus=None if address else os.cpu_count(),
            include_dashboard=False,
            log_to_driver=False,
        )
    try:
        remote = ray.remote(num_cpus=threads)(run_point)
        refs = [remote.remote(p, out, threads) for p, out in jobs]
        board = _Board(len(jobs), progress)
        while refs:
            done, refs = ray.wait(refs, num_returns=1)
            board.add(ray.get(done[0]), len(refs))
        board.close()
        return sorted(board.results, key=lambda r: r["run"])
    finally:
        if started:
            ray.shutdown()
