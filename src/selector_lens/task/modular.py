"""Modular addition, the task of grokking (Power et al. 2022; Nanda et al. 2023, "Progress
measures for grokking via mechanistic interpretability"): the input "a b =", the answer
(a + b) mod p read at "=", a seeded fraction of all p² pairs for training and the rest held out.

Trained full batch with AdamW and a large weight decay (Nanda's settings: p = 113, 30 % of the
pairs, 1 layer, 4 heads, d_model 128, d_mlp 512, ReLU, no LayerNorm, lr 1e-3, weight decay 1.0,
betas (0.9, 0.98)), the model memorises the training pairs long before it generalises: train
accuracy reaches 0.99 thousands of steps before test accuracy reaches 0.95. Its progress measure
here is the share of the embedding's energy in its top Fourier frequencies (`fourier_share`):
the generalising circuit computes with a few frequencies, and the share climbs before the test
accuracy jumps. No torch at import: the CLI reads this module for its options.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

from selector_lens.errors import SelectorLensError
from selector_lens.fields import check_fields, option
from selector_lens.lazy import lazy_module

torch = lazy_module("torch")

TOP_FREQUENCIES = 5  # Nanda et al. find 5 key frequencies at p = 113


@dataclass(frozen=True)
class ModularTask:
    """a + b mod p from the tokens "a b =" (0..p-1, then "=" as token p)."""

    p: int = option(113, "The modulus p (Nanda's 113); the vocabulary is p + 1 tokens.")
    train_frac: float = option(
        0.3, "The share of the p² pairs trained on (the rest is the test set)."
    )
    seed: int = option(42, "Seed of the train / test split.")

    name: ClassVar[str] = "modular"
    metrics: ClassVar[dict[str, str]] = {
        "loss": "training loss (nats, the training pairs)",
        "train_acc": "accuracy on the training pairs (share)",
        "test_loss": "loss on the held-out pairs (nats)",
        "test_acc": "accuracy on the held-out pairs (share)",
        "fourier_share": f"share of W_E's energy in its top {TOP_FREQUENCIES} Fourier frequencies",
    }

    def __post_init__(self):
        check_fields(self)
        if self.p < 2:
            raise SelectorLensError(f"p must be >= 2, got {self.p}")
        if not 0 < self.train_frac < 1:
            raise SelectorLensError(f"train_frac must lie in (0, 1), got {self.train_frac}")
        if self.seed < 0:
            raise SelectorLensError(f"seed must be >= 0, got {self.seed}")
        if round(self.train_frac * self.p**2) < 1:
            raise SelectorLensError(f"train_frac {self.train_frac} leaves no pair to train on")

    @property
    def d_vocab(self) -> int:
        return self.p + 1

    @property
    def seq_len(self) -> int:
        return 4  # a, b, "=", the answer

    @property
    def loss_start(self) -> int:
        return 2  # "=" predicts the answer

    @property
    def n_examples(self) -> int:
        return round(self.train_frac * self.p**2)

    positions: ClassVar[dict[str, str]] = {
        "a": 'from "=" (where the answer is read) to the first operand',
        "b": 'from "=" to the second operand',
    }

    headline: ClassVar[str] = "test_loss"

    def position_pairs(self, es: ModularData) -> dict:
        n = len(es.tokens)
        at = lambda pos: torch.full((n, 1), pos)  # noqa: E731
        return {"a": (at(2), at(0)), "b": (at(2), at(1))}

    def corrupt(self, es: ModularData, seed: int = 0) -> torch.Tensor:
        """Each example's b moved to another residue: the answer changes."""
        g = torch.Generator().manual_seed(seed)
        tokens = es.tokens.clone()
        shift = torch.randint(1, self.p, (len(tokens),), generator=g)
        tokens[:, 1] = (tokens[:, 1] + shift) % self.p
        return tokens

    def split(self):
        """Indices of all p² pairs (a * p + b), training ones first: a seeded permutation."""
        g = torch.Generator().manual_seed(self.seed)
        return torch.randperm(self.p**2, generator=g)

    def generate(self) -> ModularData:
        return ModularData(self, self.split()[: self.n_examples].tolist())

    def load(self, stored: dict) -> ModularData:
        pairs = stored.get("train_pairs")
        if not isinstance(pairs, list) or len(pairs) != self.n_examples:
            raise SelectorLensError("data.json does not hold this task's training pairs")
        return ModularData(self, pairs)

    def eval_set(self, data: ModularData, seed: int = 0, groups=None, eval_groups=None):
        return data  # every pair, its training ones marked

    def evaluate(self, model, es: ModularData, intervention=None) -> dict:
        """Loss and accuracy on the training and the held-out pairs, and the Fourier share."""
        tokens, train = es.all_tokens, es.is_train  # built outside inference mode: cached
        with torch.inference_mode():
            hooks = intervention.hooks(torch.arange(len(tokens)), 0) if intervention else []
            logits = model.run_with_hooks(tokens, fwd_hooks=hooks)[:, 2, : self.p]
            answer = tokens[:, 3]
            losses = torch.nn.functional.cross_entropy(logits, answer, reduction="none")
            right = (logits.argmax(-1) == answer).float()
            return {
                "loss": float(losses[train].mean()),
                "train_acc": float(right[train].mean()),
                "test_loss": float(losses[~train].mean()),
                "test_acc": float(right[~train].mean()),
                "fourier_share": fourier_share(model.W_E.detach()[: self.p]),
            }

    def transition(self, rows: list[dict]) -> int | None:
        """The first evaluation with test accuracy >= 0.95 (grokked)."""
        return next((r["step"] for r in rows if r.get("test_acc", 0) >= 0.95), None)

    def grokking(self, rows: list[dict]) -> dict:
        """The grokking gap in a run's rows: the first evaluation with train accuracy >= 0.99
        (memorised), the first with test accuracy >= 0.95 (generalised), and the Fourier share
        at each (the progress measure, hidden before the jump); None where not reached."""
        train = next((r for r in rows if r["train_acc"] >= 0.99), None)
        test = next((r for r in rows if r["test_acc"] >= 0.95), None)
        return {
            "p": self.p,
            "train_frac": self.train_frac,
            "train_solved_step": train and train["step"],
            "test_solved_step": test and test["step"],
            "fourier_share_at_train_solved": train and train["fourier_share"],
            "fourier_share_at_test_solved": test and test["fourier_share"],
        }

    def solved(self, row: dict, first: dict, cfg=None) -> bool:
        """Past the early-stop line: test accuracy >= 1 - early_stop_frac (0.95 by default)."""
        frac = cfg.early_stop_frac if cfg is not None else 0.05
        return row["test_acc"] >= 1 - frac


def fourier_share(w_e, top: int = TOP_FREQUENCIES) -> float:
    """The share of the embedding's energy (over the p tokens, its mean removed) in its `top`
    strongest frequencies: each frequency k in 1..p // 2 pools its cos and sin parts (k and p - k
    of the DFT along the token axis)."""
    p = w_e.shape[0]
    spectrum = torch.fft.rfft(w_e - w_e.mean(0), dim=0).abs().pow(2).sum(-1)  # [p // 2 + 1]
    energy = spectrum[1:]
    if p % 2 == 0:
        energy = energy.clone()
        energy[-1] = energy[-1] / 2  # the Nyquist term is not doubled by rfft's symmetry
    total = float(energy.sum())
    return float(energy.topk(min(top, len(energy))).values.sum()) / total if total > 0 else 0.0


class ModularData:
    """The training pairs of a `ModularTask` as tokens, and every pair (the evaluation set)."""

    def __init__(self, task: ModularTask, train_pairs: list[int]):
        self.task, self.train_pairs = task, list(train_pairs)

    @staticmethod
    def _rows(p: int, pairs) -> torch.Tensor:
        pairs = torch.as_tensor(pairs, dtype=torch.long)
        a, b = pairs // p, pairs % p
        return torch.stack([a, b, torch.full_like(a, p), (a + b) % p], dim=1)

    @cached_property
    def tokens(self) -> torch.Tensor:
        """The training examples [examples, 4]: a, b, "=", (a + b) mod p."""
        return self._rows(self.task.p, self.train_pairs)

    @cached_property
    def all_tokens(self) -> torch.Tensor:
        """Every pair [p², 4], in the order a * p + b."""
        return self._rows(self.task.p, range(self.task.p**2))

    @cached_property
    def is_train(self) -> torch.Tensor:
        mask = torch.zeros(self.task.p**2, dtype=torch.bool)
        mask[torch.as_tensor(self.train_pairs, dtype=torch.long)] = True
        return mask

    def to_json(self) -> dict:
        return {"train_pairs": self.train_pairs}
