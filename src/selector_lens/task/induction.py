"""Induction heads (Olsson et al. 2022, "In-context learning and induction heads"): sequences of
random tokens in which a segment reappears later, at an offset that varies from sequence to
sequence.

The repeat's tokens after its first are predictable only in context: a previous-token head in
layer 0 writes each position's predecessor into it, and an induction head in layer 1 attends from
a repeated token to the token after its earlier copy and copies it. The phase change: the loss on
those tokens drops suddenly while the loss on the others (random) stays at log(vocab). The offset
must vary: with a fixed one a single layer-0 head solves the task by position alone.

Metrics: the loss on the repeat's predictable tokens and on the rest, the in-context-learning
score (loss on the last quarter of the positions minus the first quarter: later positions are
more often inside the repeat), and per head the previous-token score (attention from a position
to the one before) and the induction score (attention from a repeated token to the token after
its earlier copy). No torch at import: the CLI reads this module for its options.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

import numpy as np

from selector_lens.errors import SelectorLensError
from selector_lens.fields import check_fields, option
from selector_lens.lazy import lazy_module

torch = lazy_module("torch")

BOS = 0
EVAL_SEQUENCES = 512


@dataclass(frozen=True)
class InductionTask:
    """Random tokens 1..vocab after BOS, a segment of them repeated at a random later offset."""

    vocab: int = option(64, "Random tokens (1..vocab; token 0 is BOS).")
    length: int = option(32, "Tokens per sequence, BOS included.")
    segment: int = option(8, "Tokens of the repeated segment.")
    n_sequences: int = option(20_000, "Training sequences.")
    seed: int = option(42, "Seed of the sampled sequences.")

    name: ClassVar[str] = "induction"
    metrics: ClassVar[dict[str, str]] = {
        "loss": "next-token loss over every position (nats)",
        "repeat_loss": "loss on the repeat's predictable tokens (nats; log vocab before)",
        "other_loss": "loss on every other token (nats; log vocab: they are random)",
        "icl_score": "loss on the last quarter of positions minus the first quarter (nats)",
        "prev_token_score": "attention from a position to the one before, per layer and head",
        "induction_score": "attention from a repeated token to the token after its earlier "
        "copy, per layer and head",
    }

    def __post_init__(self):
        check_fields(self)
        if self.vocab < 2 or self.segment < 2 or self.n_sequences < 1 or self.seed < 0:
            raise SelectorLensError("vocab and segment must be >= 2, n_sequences >= 1, seed >= 0")
        if self.length < 2 * self.segment + 2:
            raise SelectorLensError(
                f"length {self.length} leaves no room for a segment of {self.segment} and its "
                f"repeat after BOS: give length >= {2 * self.segment + 2}"
            )

    @property
    def d_vocab(self) -> int:
        return self.vocab + 1

    @property
    def seq_len(self) -> int:
        return self.length

    @property
    def loss_start(self) -> int:
        return 0  # every next-token prediction

    @property
    def n_examples(self) -> int:
        return self.n_sequences

    positions: ClassVar[dict[str, str]] = {
        "prev_token": "from each position to the one before",
        "induction": "from a repeated token to the token after its earlier copy",
    }

    headline: ClassVar[str] = "repeat_loss"

    def focus(self, es: InductionData) -> torch.Tensor:
        return es.predictable

    def position_pairs(self, es: InductionData) -> dict:
        """prev_token: every position to the one before; induction: `induction_pairs`."""
        n, L = len(es.rows), self.length
        queries = torch.arange(1, L).expand(n, -1)
        return {"prev_token": (queries, queries - 1), "induction": es.induction_pairs}

    def corrupt(self, es: InductionData, seed: int = 0) -> torch.Tensor:
        """The earlier copy replaced by fresh random tokens: the repeat is then unpredictable."""
        g = torch.Generator().manual_seed(seed)
        tokens = es.tokens.clone()
        fresh = torch.randint(1, self.vocab + 1, (len(tokens), self.segment), generator=g)
        at = torch.tensor(es.first)[:, None] + torch.arange(self.segment)
        tokens.scatter_(1, at, fresh)
        return tokens

    def sample(self, n: int, seed: int) -> InductionData:
        """`n` sequences: random tokens, a segment starting at `first` repeated at `second`.
        The offset second - first is uniform over segment .. length - segment - 1 and `first`
        uniform over what fits it: no offset is common enough for a head that attends by
        position alone (with `first` drawn first, the smallest offset came up in ~1 of 5
        sequences, and layer-0 heads learned to attend there)."""
        rng = np.random.default_rng(seed)
        L, S = self.length, self.segment
        tokens = rng.integers(1, self.vocab + 1, size=(n, L))
        tokens[:, 0] = BOS
        offset = rng.integers(S, L - S, size=n)  # S .. L - S - 1
        first = 1 + (rng.random(n) * (L - S - offset)).astype(int)  # 1 .. L - S - offset
        second = first + offset
        for i in range(n):
            tokens[i, second[i] : second[i] + S] = tokens[i, first[i] : first[i] + S]
        return InductionData(self, tokens.tolist(), first.tolist(), second.tolist())

    def generate(self) -> InductionData:
        return self.sample(self.n_sequences, self.seed)

    def load(self, stored: dict) -> InductionData:
        try:
            data = InductionData(self, stored["tokens"], stored["first"], stored["second"])
        except (KeyError, TypeError):
            raise SelectorLensError("data.json does not hold this task's sequences") from None
        if len(data.rows) != self.n_sequences:
            raise SelectorLensError("data.json does not hold this task's sequences")
        return data

    def eval_set(self, data, seed: int = 0, groups=None, eval_groups=None) -> InductionData:
        """A fixed set of fresh sequences, apart from the training ones (its own seed)."""
        return self.sample(EVAL_SEQUENCES, self.seed * 7_919 + 1_000_003)

    def evaluate(self, model, es: InductionData, intervention=None) -> dict:
        """The losses, the in-context-learning score and both attention scores per head."""
        tokens, predictable = es.tokens, es.predictable
        n, L = tokens.shape
        patterns = {}

        def keep(pattern, hook):
            patterns[hook.layer()] = pattern

        with torch.inference_mode():
            hooks = intervention.hooks(torch.arange(n), 0) if intervention else []
            names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(model.cfg.n_layers)]
            logits = model.run_with_hooks(tokens, fwd_hooks=[*hooks, *((h, keep) for h in names)])
            losses = torch.nn.functional.cross_entropy(
                logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten(), reduction="none"
            ).view(n, L - 1)
            q = max(1, (L - 1) // 4)
            rows = torch.arange(n)
            prev, induction = [], []
            for layer in range(model.cfg.n_layers):
                p = patterns[layer]  # [n, head, query, key]
                diag = p.diagonal(offset=-1, dim1=2, dim2=3)  # query i to key i - 1
                prev.append(diag.mean((0, 2)).tolist())
                qs, ks = es.induction_pairs
                induction.append(p[rows[:, None], :, qs, ks].mean((0, 1)).tolist())
            return {
                "loss": float(losses.mean()),
                "repeat_loss": float(losses[predictable].mean()),
                "other_loss": float(losses[~predictable].mean()),
                "icl_score": float(losses[:, -q:].mean() - losses[:, :q].mean()),
                "prev_token_score": prev,
                "induction_score": induction,
            }

    def transition(self, rows: list[dict]) -> int | None:
        """The phase change: the first evaluation whose repeat loss is below half its first."""
        if not rows:
            return None
        start = rows[0]["repeat_loss"]
        return next((r["step"] for r in rows if r["repeat_loss"] < 0.5 * start), None)

    def phase_change(self, rows: list[dict], attention, ablation, patching) -> dict:
        """The phase change in a run's tables, its heads named by two witnesses each.

        rows: the evaluations; attention, ablation, patching: at one checkpoint after the change,
        `attention_to_positions`, `ablate_each_head` (mean) and `patch_series` (site z) tables.
        The previous-token head is the layer-0 head with the most attention at "prev_token",
        the induction head the layer-1 head with the most at "induction"; beside each, its
        ablation cost on the repeat loss (nats), the layer's costliest head, and the share of
        the repeat loss that patching its output from clean into the corrupted input (the
        earlier copy redrawn) recovers. ICL score before: at the last evaluation before the
        change; after: at the last evaluation."""
        step = self.transition(rows)
        before = [r for r in rows if step is not None and r["step"] < step]
        out = {
            "phase_change_step": step,
            "icl_score_before": before[-1]["icl_score"] if before else None,
            "icl_score_after": rows[-1]["icl_score"] if rows else None,
            "heads_at_step": int(ablation.step.iloc[0]),
        }
        for role, layer, position in (
            ("prev_token", 0, "prev_token"),
            ("induction", 1, "induction"),
        ):
            scores = attention[(attention.position == position) & (attention.layer == layer)]
            best = scores.loc[scores.attention.idxmax()]
            costs = ablation[ablation.layer == layer]
            cost = costs.set_index("head").delta_repeat_loss
            recovered = patching[patching.layer == layer].set_index("head").value
            top = int(cost.idxmax())
            out |= {
                f"{role}_head": f"L{layer}H{int(best['head'])}",
                f"{role}_score": float(best.attention),
                f"{role}_ablation_cost": float(cost[int(best["head"])]),
                f"{role}_patching_recovered": float(recovered[int(best["head"])]),
                f"{role}_costliest_head": f"L{layer}H{top}",
                f"{role}_costliest_cost": float(cost[top]),
            }
        return out

    def solved(self, row: dict, first: dict, cfg=None) -> bool:
        """Past the early-stop line: the repeat loss below early_stop_frac x its first value."""
        frac = cfg.early_stop_frac if cfg is not None else 0.05
        return row["repeat_loss"] < frac * first["repeat_loss"]


class InductionData:
    """Sequences of an `InductionTask` with where each one's segment and its repeat start."""

    def __init__(self, task: InductionTask, rows, first, second):
        self.task, self.rows = task, [list(r) for r in rows]
        self.first, self.second = list(first), list(second)

    @cached_property
    def tokens(self) -> torch.Tensor:
        return torch.tensor(self.rows, dtype=torch.long)

    @cached_property
    def predictable(self) -> torch.Tensor:
        """Over predictions [n, length - 1]: True where the next token is one of the repeat's
        after its first (positions second .. second + segment - 2 predict them)."""
        n, S = len(self.rows), self.task.segment
        mask = torch.zeros(n, self.task.length - 1, dtype=torch.bool)
        for i, b in enumerate(self.second):
            mask[i, b : b + S - 1] = True
        return mask

    @cached_property
    def induction_pairs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(query, key) positions [n, segment - 1]: each repeated token (but the last) and the
        token after its earlier copy."""
        j = torch.arange(self.task.segment - 1)
        second = torch.tensor(self.second)[:, None]
        first = torch.tensor(self.first)[:, None]
        return second + j, first + j + 1

    def to_json(self) -> dict:
        return {"tokens": self.rows, "first": self.first, "second": self.second}
