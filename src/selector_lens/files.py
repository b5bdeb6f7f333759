"""File helpers without torch: atomic writes, so a killed process never leaves a torn file."""

from __future__ import annotations

import os
from pathlib import Path


def atomic_write(path: Path, write) -> None:
    """Write through `write(tmp_path)` then rename over `path`."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text))
