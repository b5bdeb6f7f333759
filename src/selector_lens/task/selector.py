"""The selector task (docs/science.md section 1): strings, token tensors, candidate sets, positions.

`SelectorTask` is the frozen config; `generate()` samples the strings once from its seed;
`data.TaskData.from_strings` turns strings into tensors, so a run rebuilt from its
`data.json` is exact even if the sampler changes later. No torch here: the CLI reads this
module for its options.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from selector_lens.errors import SelectorLensError
from selector_lens.fields import check_fields, option
from selector_lens.task.vocab import ALPHABET, D_VOCAB

if TYPE_CHECKING:
    from selector_lens.task.data import TaskData

DIRECTIONS = ("bz_to_a", "b_to_a", "a_to_b", "az_to_b")
LAG_FRAC = 0.1  # the paper's lag rule: first-target loss below 0.1 x its step-0 value
PARITIES = ("ours", "paper")


@dataclass(frozen=True)
class SelectorTask:
    """K-fold ambiguous map B -> A, resolved by a selector z shared by every B.

    Directions: `bz_to_a` (the paper's task), `b_to_a` (no z, irreducible loss log K),
    `a_to_b` (the one-to-one reverse), `az_to_b` (reverse with a redundant z).
    """

    k: int = option(10, "Targets per base (ambiguity K).")
    n_bases: int = option(1000, "Distinct base strings; D = n_bases x K.")
    b_length: int = option(6, "Characters of a base string B.")
    a_length: int = option(4, "Characters of a target string A.")
    z_length: int = option(2, "Characters of a selector z.")
    direction: str = option("bz_to_a", "What maps to what.", DIRECTIONS)
    unique_first_char: bool = option(
        True, "The K targets of a base start with K different characters."
    )
    seed: int = option(42, "Seed of the sampled strings.")
    z_groups: int = option(
        1,
        "Super-groups of bases, each with its own K selectors (1: every base shares the same K; "
        "n_bases: every base has private selectors). Base g is in super-group g mod z_groups.",
    )
    parity: str = option(
        "ours",
        "paper: the paper code's dataset, initial weights, batch order and lr, "
        "string for string (task/paper.py).",
        PARITIES,
    )

    name: ClassVar[str] = "selector"
    positions: ClassVar[dict[str, str]] = {
        "z": "from the position that predicts the first target (a1) to the selector z",
    }
    metrics: ClassVar[dict[str, str]] = {
        "loss": "loss on the target tokens and EOS (nats)",
        "first_target_loss": "loss on the first target token (nats)",
        "token_acc": "accuracy on the target tokens and EOS (share)",
        "candidate_loss": "-log P(true target) among the K candidates (nats; log K on the plateau)",
        "candidate_acc": "share of examples whose true target is the likeliest candidate",
        "dz": "first-target loss with z deranged minus clean (nats)",
        "attn_to_z": "attention from the a1-predicting position to z, per layer and head",
    }

    def __post_init__(self):
        check_fields(self)
        n = len(ALPHABET)
        if self.parity not in PARITIES:
            raise SelectorLensError(
                f"unknown parity {self.parity!r}; choose one of {', '.join(PARITIES)}"
            )
        if self.direction not in DIRECTIONS:
            raise SelectorLensError(
                f"unknown direction {self.direction!r}; choose one of {', '.join(DIRECTIONS)}"
            )
        if self.k < 1:
            raise SelectorLensError(f"k must be >= 1, got {self.k}")
        if self.seed < 0:
            raise SelectorLensError(f"seed must be >= 0, got {self.seed}")
        if self.n_bases < 1:
            raise SelectorLensError(f"n_bases must be >= 1, got {self.n_bases}")
        for name in ("b_length", "a_length", "z_length"):
            if getattr(self, name) < 1:
                raise SelectorLensError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.unique_first_char and self.k > n:
            raise SelectorLensError(
                f"k={self.k} > {n}: with unique_first_char the K targets of a base need K "
                f"different first characters (turn unique_first_char off for larger K)"
            )
        if not 1 <= self.z_groups <= self.n_bases:
            raise SelectorLensError(
                f"z_groups must lie in 1..n_bases={self.n_bases}, got {self.z_groups}"
            )
        if self.z_groups > 1 and self.parity == "paper":
            raise SelectorLensError("parity 'paper' has one set of selectors: leave z_groups at 1")
        need = self.k * self.z_groups
        if need > n**self.z_length:
            raise SelectorLensError(
                f"k={self.k} x z_groups={self.z_groups} needs {need} distinct selectors but "
                f"z_length={self.z_length} allows only {n**self.z_length}; raise z_length"
            )
        if self.n_bases > n**self.b_length:
            raise SelectorLensError(
                f"n_bases={self.n_bases} exceeds the {n**self.b_length} strings of length "
                f"{self.b_length}"
            )
        # Each B uses each first character at most once, so a character heads <= n_bases targets.
        room = n ** (self.a_length - 1) if self.unique_first_char else n**self.a_length
        need = self.n_bases if self.unique_first_char else self.n_bases * self.k
        if need > room:
            raise SelectorLensError(
                f"n_bases={self.n_bases} with k={self.k} needs more globally unique targets than "
                f"strings of length {self.a_length} allow"
                + (" with unique first characters" if self.unique_first_char else "")
            )

    @property
    def has_z(self) -> bool:
        return self.direction in ("bz_to_a", "az_to_b")

    @property
    def has_candidates(self) -> bool:
        """The K targets of a base are the candidates (forward directions only)."""
        return self.direction in ("bz_to_a", "b_to_a")

    @property
    def n_examples(self) -> int:
        return self.n_bases * self.k

    @property
    def log_k(self) -> float:
        return math.log(self.k)

    @property
    def source_length(self) -> int:
        """Tokens before the target: BOS, source, SEP, and z with its SEP when present."""
        src = self.a_length if self.direction.startswith("a") else self.b_length
        return 2 + src + (self.z_length + 1 if self.has_z else 0)

    @property
    def target_length(self) -> int:
        return self.b_length if self.direction.startswith("a") else self.a_length

    @property
    def seq_len(self) -> int:
        return self.source_length + self.target_length + 1  # + EOS

    @property
    def z_positions(self) -> list[int]:
        if not self.has_z:
            return []
        start = 2 + (self.a_length if self.direction.startswith("a") else self.b_length)
        return list(range(start, start + self.z_length))

    @property
    def first_target_pos(self) -> int:
        """The position whose logits predict the first target token (a1 for bz_to_a: 10)."""
        return self.source_length - 1

    # --- the task protocol (task/protocol.py) ---------------------------------------------
    @property
    def d_vocab(self) -> int:
        return D_VOCAB

    @property
    def loss_start(self) -> int:
        return self.first_target_pos

    def load(self, stored: dict) -> TaskData:
        from selector_lens.task.data import TaskData  # lazily: torch

        return TaskData.from_strings(self, **stored)

    def eval_set(self, data: TaskData, seed: int, groups=None, eval_groups="auto"):
        from selector_lens.task.eval_set import make_eval_set

        return make_eval_set(data, eval_groups, seed=seed, groups=groups)

    # evaluate: the model wing's cached passes (`model.metrics.evaluate`, by `model.evaluation`)

    def transition(self, rows: list[dict], threshold: float = 0.5) -> int | None:
        """τ: the first evaluation with candidate loss < `threshold` x log K (K = 1: None)."""
        if self.k == 1:
            return None
        line = threshold * self.log_k
        losses = ((r["step"], r.get("candidate_loss")) for r in rows)
        return next((step for step, c in losses if c is not None and c < line), None)

    def solved(self, row: dict, first: dict, cfg=None) -> bool:
        """Past the early-stop line (TrainConfig's early_stop_frac / early_stop_acc)."""
        frac = cfg.early_stop_frac if cfg is not None else 0.05
        if cfg is not None and cfg.early_stop_acc is not None:
            return (
                row["token_acc"] >= cfg.early_stop_acc
                and row["first_target_loss"] < LAG_FRAC * first["first_target_loss"]
            )
        if self.direction == "b_to_a":
            return False
        if self.has_candidates:
            return self.k > 1 and row["candidate_loss"] < frac * self.log_k
        return row["loss"] < frac

    def generate(self) -> TaskData:
        """Sample the strings from `seed` and build the tensors (parity "paper": the paper's
        code's strings, in its order)."""
        from selector_lens.task.data import TaskData  # lazily: torch

        if self.parity == "paper":
            from selector_lens.task.paper import paper_strings

            return TaskData.from_strings(self, *paper_strings(self))
        rng = np.random.default_rng(self.seed)
        n = len(ALPHABET)
        bases = [_to_str(i, self.b_length) for i in _distinct(rng, self.n_bases, n**self.b_length)]
        count = self.k * self.z_groups  # super-group s uses zs[s * K : (s + 1) * K]
        zs = [_to_str(i, self.z_length) for i in _distinct(rng, count, n**self.z_length)]
        if self.unique_first_char:
            firsts = np.stack([rng.permutation(n)[: self.k] for _ in range(self.n_bases)])
            targets = np.empty((self.n_bases, self.k), dtype=object)
            for c in range(n):
                where = np.nonzero(firsts == c)
                tails = _distinct(rng, len(where[0]), n ** (self.a_length - 1))
                for (g, j), t in zip(zip(*where), tails):
                    targets[g, j] = ALPHABET[c] + _to_str(t, self.a_length - 1)
        else:
            flat = _distinct(rng, self.n_examples, n**self.a_length)
            targets = np.array([_to_str(i, self.a_length) for i in flat], dtype=object)
        targets = targets.reshape(self.n_bases, self.k).tolist()
        return TaskData.from_strings(self, bases, zs, targets)


def _distinct(rng: np.random.Generator, count: int, space: int) -> list[int]:
    """`count` distinct integers in [0, space), in random order."""
    if space <= 1 << 22:
        return rng.choice(space, size=count, replace=False).tolist()
    seen: dict[int, None] = {}
    while len(seen) < count:
        for v in rng.integers(0, space, size=count - len(seen)).tolist():
            seen.setdefault(v)
    return list(seen)


def _to_str(index: int, length: int) -> str:
    chars = []
    for _ in range(length):
        index, r = divmod(index, len(ALPHABET))
        chars.append(ALPHABET[r])
    return "".join(reversed(chars))
