"""File helpers without torch: atomic writes (a killed process never leaves a torn file) and
JSON read with one clear error for a missing or corrupt file."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from pathlib import Path

from selector_lens.errors import SelectorLensError


def atomic_write(path: Path, write, size: int | None = None) -> None:
    """Write through `write(tmp_path)` then rename over `path`. On a full disk: the temporary
    file removed and one clear error naming the path and what it needed (`size`, when known)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise disk_full(path, size) from None
        if isinstance(e, RuntimeError) and "No space left" in str(e):  # torch.save's wording
            raise disk_full(path, size) from None
        raise


def disk_full(path: Path, size: int | None = None) -> SelectorLensError:
    """The one-line error for a full disk: the path, the bytes it needed and the bytes free."""
    try:
        free = shutil.disk_usage(Path(path).parent).free
    except OSError:
        free = None
    need = f"{size:,} bytes" if size is not None else "more space"
    have = f"; {free:,} bytes free" if free is not None else ""
    return SelectorLensError(f"disk full writing {path}: it needs {need}{have}")


def atomic_write_text(path: Path, text: str) -> None:
    data = text.encode()
    atomic_write(path, lambda tmp: tmp.write_bytes(data), len(data))


def sha256_sums(folder: Path, under: str | tuple[str, ...]) -> dict[str, str]:
    """sha256 of every file below `folder/under` (one subfolder or several; one that is not
    there has none), by its path relative to `folder`."""
    folder = Path(folder)
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for sub in ((under,) if isinstance(under, str) else under)
        for p in sorted((folder / sub).rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    }


def check_sums(folder: Path, sums_file: str, under: str | tuple[str, ...]) -> None:
    """One clear error naming the files below `folder/under` that differ from, or are missing
    in or absent from, the sums `folder/sums_file` records."""
    recorded = read_json(Path(folder) / sums_file)
    found = sha256_sums(folder, under)
    changed = sorted(k for k in recorded.keys() & found.keys() if recorded[k] != found[k])
    missing = sorted(recorded.keys() - found.keys())
    extra = sorted(found.keys() - recorded.keys())
    parts = [
        f"{what}: {', '.join(names[:3])}{' ...' if len(names) > 3 else ''}"
        for what, names in (("changed", changed), ("missing", missing), ("not listed", extra))
        if names
    ]
    if parts:
        raise SelectorLensError(
            f"{folder} differs from its {sums_file} ({'; '.join(parts)}): published files are "
            "read as published; publish again to record a change"
        )


def write_json(path: Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=1))


def read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SelectorLensError(f"missing file: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SelectorLensError(f"corrupt file: {path} ({e})") from None
