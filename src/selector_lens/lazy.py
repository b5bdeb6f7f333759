"""torch on first use, for modules that also answer from the analysis store.

An analysis module both computes its table (torch) and serves it from the run's store (JSON).
Importing torch costs about a second, more than drawing a stored dashboard takes, so those
modules bind `torch = lazy_module("torch")`: the name imports the module at its first attribute
access (a call, or a jaxtyping annotation when the test suite's type checker reads it), and a
table served from the store never touches it.
"""

from __future__ import annotations

import functools
import importlib


class _LazyModule:
    """Stands for a module until an attribute is read; each attribute is then looked up once."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str):
        value = getattr(importlib.import_module(self._name), attr)
        setattr(self, attr, value)  # later reads skip __getattr__
        return value

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


def lazy_module(name: str) -> _LazyModule:
    """`name`, imported at the first attribute read."""
    return _LazyModule(name)


def inference_mode(fn):
    """`@torch.inference_mode()` without importing torch when the function is defined."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        import torch

        with torch.inference_mode():
            return fn(*args, **kwargs)

    return run
