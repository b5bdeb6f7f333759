"""Noise-only steps: the minibatch gradient's noise scaled by C, nothing else changed (issue 44).

Changing lr or batch size to test "noise holds the plateau" changes two things at once (the
noise and the pace). A noise-scaled branch keeps the lr, the batch and the examples, and steps on

    g = ḡ + C (g_B - ḡ),

g_B the minibatch gradient and ḡ an estimate of the full-batch gradient: the gradient on a
reference batch of REFERENCE_X x the training batch (the whole training set when it is smaller:
then ḡ is exact), drawn afresh from the training set at every refresh and recomputed every
REFRESH_EVERY steps (between refreshes the last ḡ stands in; `staleness` measures what that
costs). C = 1 is the ordinary step bit for bit (ḡ is still measured, for the records below);
C = 0 is the (nearly) full-batch step; C > 1 adds noise of the minibatch's own shape. Clipping
acts on the final g, as in training.

So that a reader can tell "noise holds the plateau" from "a smaller effective step does", every
step records (averaged into each evaluation's row, `noise_*` keys): how often clipping bound,
the update's norm, its component down the mean gradient (-Δθ·ḡ/|ḡ|), |ḡ| and the noise's norm
|g_B - ḡ|, and at each refresh how far ḡ moved since the last one (relative to its norm).
"""

from __future__ import annotations

import torch

REFERENCE_X = 16  # the reference batch, in training batches
REFRESH_EVERY = 4  # steps between two estimates of ḡ (measured: docs/recipes/branching.md)
CHUNK = 256  # reference rows a forward pass takes at once (256: 0.9 of 512's time, measured)
STATS = ("clip", "update_norm", "update_along_mean", "mean_grad_norm", "noise_norm")


def reference_seed(seed: int, step: int) -> int:
    """The reference batch drawn at `step`: a pure function of the branch's seed and the step,
    apart from the training batch order's stream (a resumed branch draws the same)."""
    return (seed * 7_919 + step) * 2_147_483_629 % (2**62)


class NoiseScale:
    """One run's noise scaling: its ḡ, when to refresh it, and its records since the last row.

    `batch_of(index, step)`: the run's training examples at `index` as that step trains on them
    (a branch's z change applied); `losses`: the training loss of one model on such a batch
    (`training.trainer.target_losses` with the run's hooks)."""

    def __init__(
        self,
        scale: float,
        n_examples: int,
        batch_size: int,
        seed: int,
        reference_x: int = REFERENCE_X,
        every: int = REFRESH_EVERY,
    ):
        self.scale, self.seed, self.every = float(scale), seed, every
        self.n, self.rows = n_examples, min(n_examples, reference_x * batch_size)
        self.mean: list[torch.Tensor] | None = None  # ḡ, one tensor per parameter
        self.sums = dict.fromkeys(STATS, 0.0)
        self.steps, self.moved, self.refreshes = 0, 0.0, 0

    def due(self, step: int) -> bool:
        """Is ḡ recomputed before `step` (1-based)? Every REFRESH_EVERY steps, and whenever
        none is held (a branch's first step, or the first after a resume without one)."""
        return self.mean is None or (step - 1) % self.every == 0

    def refresh(self, model, step: int, batch_of, losses) -> None:
        """ḡ at the model's present parameters, from a fresh reference batch."""
        params = [p for p in model.parameters() if p.requires_grad]
        if self.rows >= self.n:
            index = torch.arange(self.n)
        else:
            g = torch.Generator().manual_seed(reference_seed(self.seed, step))
            index = torch.randperm(self.n, generator=g)[: self.rows]
        total = [torch.zeros_like(p) for p in params]
        for chunk in index.split(CHUNK):
            loss = losses(model, batch_of(chunk, step)) * (len(chunk) / len(index))
            for t, g in zip(total, torch.autograd.grad(loss, params)):
                t.add_(g)
        if self.mean is not None:
            self.moved += float(_norm(_sub(total, self.mean)) / _norm(total).clamp_min(1e-30))
            self.refreshes += 1
        self.mean = total

    def mix(self, model) -> None:
        """Replace each minibatch gradient by ḡ + C (g_B - ḡ) (C = 1: left as it is), and
        record the noise's norm and |ḡ|."""
        grads = [p.grad for p in model.parameters() if p.requires_grad]
        noise = _sub(grads, self.mean)
        self.sums["noise_norm"] += float(_norm(noise))
        self.sums["mean_grad_norm"] += float(_norm(self.mean))
        if self.scale != 1.0:
            for g, m, n in zip(grads, self.mean, noise):
                torch.add(m, n, alpha=self.scale, out=g)

    def record(self, grad_norm: float | None, clip: float, before: list, model) -> None:
        """After the optimizer step: did clipping bind, and the update Δθ, its norm and its
        component down ḡ."""
        params = [p.detach() for p in model.parameters() if p.requires_grad]
        delta = _sub(params, before)
        mean_norm = _norm(self.mean).clamp_min(1e-30)
        along = -sum(float((d * m).sum()) for d, m in zip(delta, self.mean)) / float(mean_norm)
        self.sums["clip"] += float(grad_norm is not None and clip > 0 and grad_norm > clip)
        self.sums["update_norm"] += float(_norm(delta))
        self.sums["update_along_mean"] += along
        self.steps += 1

    def row(self) -> dict:
        """The records since the last row, averaged per step (`noise_*` keys); then reset."""
        if not self.steps:
            return {"noise_scale": self.scale}
        out = {"noise_scale": self.scale}
        out.update({f"noise_{k}": v / self.steps for k, v in self.sums.items()})
        out["noise_staleness"] = self.moved / self.refreshes if self.refreshes else None
        self.sums = dict.fromkeys(STATS, 0.0)
        self.steps, self.moved, self.refreshes = 0, 0.0, 0
        return out

    def state(self) -> dict:
        """What a resume needs to continue exactly: ḡ and the records since the last row."""
        return {
            "mean": [m.clone() for m in self.mean] if self.mean is not None else [],
            "sums": torch.tensor([self.sums[k] for k in STATS], dtype=torch.float64),
            "counts": torch.tensor([self.steps, self.refreshes], dtype=torch.int64),
            "moved": torch.tensor(self.moved, dtype=torch.float64),
        }

    def load(self, state: dict) -> None:
        self.mean = [m.clone() for m in state["mean"]] or None
        self.sums = dict(zip(STATS, state["sums"].tolist()))
        self.steps, self.refreshes = state["counts"].tolist()
        self.moved = float(state["moved"])


def _sub(a: list[torch.Tensor], b: list[torch.Tensor]) -> list[torch.Tensor]:
    return list(torch._foreach_sub(a, b))


def _norm(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(tensors)))
