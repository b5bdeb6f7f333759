"""Which checkpoints an analysis reads."""

from __future__ import annotations

import numpy as np


def thin(steps, max_steps: int):
    """At most `max_steps` evenly spaced entries of the sorted `steps`, first and last kept."""
    steps = sorted(steps)
    if len(steps) <= max_steps:
        return steps
    idx = np.unique(np.linspace(0, len(steps) - 1, max_steps).round().astype(int))
    return [steps[i] for i in idx]
