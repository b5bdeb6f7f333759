"""File helpers without torch: atomic writes (a killed process never leaves a torn file) and
JSON read with one clear error for a missing or corrupt file."""

from __future__ import annotations

import json
import os
from pathlib import Path

from selector_lens.errors import SelectorLensError


def atomic_write(path: Path, write) -> None:
    """Write through `write(tmp_path)` then rename over `path`."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text))


def write_json(path: Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=1))


def read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SelectorLensError(f"missing file: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SelectorLensError(f"corrupt file: {path} ({e})") from None
