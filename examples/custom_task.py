"""Your own task, in one small file: the sum of the last `window` digits, mod `m`.

    selector-lens train --task examples/custom_task.py:WindowSum --n-layers 2 --steps 2000 \
        --out checkpoints/windowsum

A task is a frozen dataclass: its fields are its options, and these members say the rest
(docs/recipes/tasks.md lists them). This file is Python and runs with your rights when loaded.
"""

from dataclasses import dataclass
from typing import ClassVar

import torch


@dataclass(frozen=True)
class WindowSum:
    m: int = 5  # digits 0..m-1; "=" is token m
    length: int = 6  # digits per example
    window: int = 2  # the answer sums the last `window` digits
    n_train: int = 4000  # training examples
    seed: int = 0  # seed of the sampled digits

    name: ClassVar[str] = "windowsum"  # how run.json and the CLI name it
    metrics: ClassVar[dict] = {  # no `evaluate` of its own: the toolkit's loss and accuracy
        "loss": "loss on the answer (nats)",
        "token_acc": "accuracy on the answer (share)",
    }
    positions: ClassVar[dict] = {"window": 'from "=" to the digits the answer sums'}

    @property
    def d_vocab(self) -> int:  # the tokens the model embeds and predicts
        return self.m + 1

    @property
    def seq_len(self) -> int:  # digits, "=", answer
        return self.length + 2

    @property
    def loss_start(self) -> int:  # "=" predicts the answer: the only prediction trained on
        return self.length

    @property
    def n_examples(self) -> int:
        return self.n_train

    def sample(self, n: int, seed: int) -> "Examples":
        g = torch.Generator().manual_seed(seed)
        digits = torch.randint(self.m, (n, self.length), generator=g)
        answer = digits[:, -self.window :].sum(1) % self.m
        equals = torch.full((n, 1), self.m)
        return Examples(torch.cat([digits, equals, answer[:, None]], 1))

    def generate(self) -> "Examples":  # the training set, from the seed
        return self.sample(self.n_train, self.seed)

    def load(self, stored: dict) -> "Examples":  # the training set again, from data.json
        return Examples(torch.tensor(stored["tokens"]))

    def eval_set(self, data, seed=0, groups=None, eval_groups=None) -> "Examples":
        return self.sample(500, self.seed + 1)  # fresh examples, fixed by the seed

    def position_pairs(self, es) -> dict:  # where "window" points: "=" to each summed digit
        n, keys = len(es.tokens), torch.arange(self.length - self.window, self.length)
        return {"window": (torch.full((n, self.window), self.length), keys.expand(n, -1))}

    def corrupt(self, es, seed: int = 0) -> torch.Tensor:  # the summed digits redrawn: patching
        g, tokens = torch.Generator().manual_seed(seed), es.tokens.clone()  # reads this input
        tokens[:, self.length - self.window : self.length] = torch.randint(
            self.m, (len(tokens), self.window), generator=g
        )
        return tokens

    def transition(self, rows: list) -> int | None:
        """The first evaluation with answer accuracy >= 0.9."""
        return next((r["step"] for r in rows if r["token_acc"] >= 0.9), None)

    def solved(self, row: dict, first: dict, cfg=None) -> bool:  # the early-stop line
        return row["token_acc"] >= 1 - (cfg.early_stop_frac if cfg else 0.05)


class Examples:
    """A task's data: `.tokens` [examples, seq_len] and what data.json stores."""

    def __init__(self, tokens: torch.Tensor):
        self.tokens = tokens

    def to_json(self) -> dict:
        return {"tokens": self.tokens.tolist()}
