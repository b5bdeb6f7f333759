"""Tables computed from checkpoints, kept with the run: `<run>/analyses/`.

One JSON file per analysis, parameters and checkpoint:
`analyses/<analysis>/<params-hash>/step_000450.json`, holding its key and its rows. The key is the
analysis name, its parameters, the checkpoint's checksum (read from the safetensors header, or
from `checkpoints.json` in a published run) and the analysis' code version. A file whose key
differs from the one asked for is recomputed and overwritten, never served. A copied run
directory keeps its store; a published run (weights left out) serves what it stored, since
the key still names the weights it came from. No torch here: reading a store is instant.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

from selector_lens import __version__
from selector_lens.errors import SelectorLensError
from selector_lens.files import atomic_write_text

STORE_DIR = "analyses"
MANIFEST = (
    "checkpoints.json"  # a published run's record of the weights it left out: step -> checksum
)
SUMS = "sha256sums.json"  # a published folder's record of its runs' files (`publish`)
PUBLISHED = ("runs", "branches", "branch-points")  # runs, branches of some, their branch points


def checkpoint_checksum(path: Path) -> str | None:
    """The checksum a checkpoint records in its safetensors header (None if the file is absent)."""
    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, struct.error) as e:
        raise SelectorLensError(f"corrupt checkpoint: {path} ({e})") from None
    return (header.get("__metadata__") or {}).get("checksum")


_VERIFIED: dict[tuple, str] = {}  # (path, size, mtime) -> its checksum, once checked


def verified_checksum(path: Path) -> str | None:
    """The checksum a checkpoint records, after checking it against the tensors' bytes in the
    file (as `model.adapter.tensors_checksum` computes it, read without torch: ~1 ms a MB);
    None if the file is absent. A truncated or altered file is one clear error, so the store
    never serves a table for weights that are not the ones it was computed from."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _VERIFIED:
        raw = path.read_bytes()
        try:
            (n,) = struct.unpack("<Q", raw[:8])
            header = json.loads(raw[8 : 8 + n])
            recorded = header.pop("__metadata__", {})["checksum"]
            h = hashlib.sha256()
            for name in sorted(header):
                start, end = header[name]["data_offsets"]
                if 8 + n + end > len(raw):
                    raise ValueError("truncated")
                h.update(name.encode())
                h.update(raw[8 + n + start : 8 + n + end])
        except (ValueError, KeyError, TypeError, struct.error) as e:
            raise SelectorLensError(f"corrupt checkpoint: {path} ({e})") from None
        if h.hexdigest() != recorded:
            raise SelectorLensError(f"corrupt checkpoint: {path} (checksum mismatch)")
        _VERIFIED[key] = recorded
    return _VERIFIED[key]


def weights_checksum(run, step: int) -> str | None:
    """The checksum of `run`'s weights at `step`: from the file (verified), else from a
    published manifest."""
    found = verified_checksum(run.ckpt_path(step))
    if found is None and (run.path / MANIFEST).is_file():
        found = json.loads((run.path / MANIFEST).read_text()).get(str(step))
    return found


def _params_hash(params: dict) -> str:
    return hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()[:12]


def step_path(run, analysis: str, params: dict, step: int) -> Path:
    return run.path / STORE_DIR / analysis / _params_hash(params) / f"step_{step:06d}.json"


def per_step(
    run,
    analysis: str,
    version: str,
    params: dict,
    steps,
    compute,
    recompute: bool = False,
    together: bool = False,
):
    """Rows of `analysis` at each step (default: every checkpoint; a DataFrame with a `step`
    column): served from the store where the key matches, the rest computed by
    `compute(missing_steps)` and stored, one step at a time (an analysis killed midway keeps the
    steps it finished), or in one call with `together` (a table whose rows depend on each other,
    e.g. displacements). A step without a checkpoint is one clear error, before any work."""
    import pandas as pd

    steps = run.steps if steps is None else list(steps)
    for step in steps:
        run.check_step(step)
    found, missing = {}, []
    for step in steps:
        key = {
            "analysis": analysis,
            "version": f"{__version__}/{version}",
            "params": params,
            "checksum": weights_checksum(run, step),
        }
        path = step_path(run, analysis, params, step)
        if not recompute and path.is_file():
            stored = json.loads(path.read_text())
            if json.loads(json.dumps(key, default=str)) == stored["key"]:
                found[step] = stored["rows"]
                continue
        missing.append((step, key, path))
    batches = [missing] if together else [[m] for m in missing]
    if run.progress and len(batches) > 1:  # one line per analysis, not step
        from selector_lens.runs.progress import tracked

        batches = tracked(batches, f"{analysis}: checkpoints")
    for batch in batches if missing else []:
        table = compute([s for s, _, _ in batch])
        for step, key, path in batch:
            rows = table[table.step == step].to_dict(orient="records")
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps({"key": key, "rows": rows}, default=_plain))
            found[step] = json.loads(json.dumps(rows, default=_plain))
    return pd.DataFrame([row for step in steps for row in found[step]])


def per_checkpoint(
    run, analysis: str, version: str, params: dict, steps, make_rows, recompute: bool = False
):
    """`per_step` for the usual analysis, one whose rows at a step come from that checkpoint's
    model alone: `make_rows()` prepares what every step shares (an evaluation set, examples)
    only when something is computed, and returns `rows_at(step, model) -> [row, ...]`; each row
    gets its `step` first."""

    def compute(todo):
        import pandas as pd

        rows_at = make_rows()
        rows = [{"step": s, **r} for s, model in run.series(todo) for r in rows_at(s, model)]
        return pd.DataFrame(rows)

    return per_step(run, analysis, version, params, steps, compute, recompute)


def stored_tables(run, analysis: str, version: str) -> list[tuple[dict, list[dict]]]:
    """Every table of `analysis` the store keeps for these weights at this code version, whatever
    parameters it was asked with: [(params, rows)], for showing what someone computed (the
    dashboard's landscape), where `per_step` serves one request."""
    out, steps = [], set(run.steps)
    for folder in sorted((run.path / STORE_DIR / analysis).glob("*")):
        rows, params = [], None
        for path in sorted(folder.glob("step_*.json")):
            stored = json.loads(path.read_text())
            key = stored["key"]
            step = int(path.stem.split("_")[1])
            fresh = key["version"] == f"{__version__}/{version}"
            if fresh and step in steps and key["checksum"] == weights_checksum(run, step):
                params = key["params"]
                rows += stored["rows"]
        if rows:
            out.append((params, rows))
    return out


def _plain(x):
    """numpy scalars -> Python numbers for JSON."""
    return x.item() if hasattr(x, "item") else str(x)
