"""Which examples each optimizer step sees: a fresh seeded permutation per epoch."""

from __future__ import annotations

import math

import torch


class BatchOrder:
    """Step -> example indices: each epoch is a fresh permutation seeded by (seed, epoch)."""

    def __init__(self, n_examples: int, batch_size: int, seed: int):
        self.n, self.b, self.seed = n_examples, batch_size, seed
        self.per_epoch = math.ceil(n_examples / batch_size)
        self._epoch, self._perm = -1, None

    def indices(self, step: int) -> torch.Tensor:
        """Examples of optimizer step `step` (1-based)."""
        epoch, j = divmod(step - 1, self.per_epoch)
        if epoch != self._epoch:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._epoch, self._perm = epoch, torch.randperm(self.n, generator=g)
        return self._perm[j * self.b : (j + 1) * self.b]

    def examples_seen(self, step: int) -> int:
        epoch, j = divmod(step, self.per_epoch)
        return epoch * self.n + min(j * self.b, self.n)
