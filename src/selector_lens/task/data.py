"""The dataset of a task as tensors, built from its strings (`TaskData.from_strings`), so a run
rebuilt from its `data.json` is exact; the tensors are built on first use (a page that shows
examples needs no torch)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from jaxtyping import Bool, Int

from selector_lens.errors import SelectorLensError
from selector_lens.lazy import lazy_module
from selector_lens.task.vocab import BOS, EOS, SEP, encode

torch = lazy_module("torch")  # the tensors are built on first use

if TYPE_CHECKING:  # the task builds its data (`SelectorTask.generate`): no import back
    from selector_lens.task.selector import SelectorTask


@dataclass
class TaskData:
    """The dataset of one task: strings and the tensors every other module reads.

    Example e = g * K + i is base g with its i-th target and the i-th selector of its
    super-group s = g mod z_groups: `zs[s * K + i]` (with z_groups = 1, `zs` is the K selectors
    every base shares).
    """

    task: SelectorTask
    bases: list[str]
    zs: list[str]  # z_groups x K selectors, super-group-major
    targets: list[list[str]]  # [n_bases][K]

    @classmethod
    def from_strings(cls, task: SelectorTask, bases, zs, targets) -> TaskData:
        if (
            len(bases) != task.n_bases
            or len(zs) != task.k * task.z_groups
            or any(len(t) != task.k for t in targets)
        ):
            raise SelectorLensError("strings do not match the task's n_bases, k and z_groups")
        return cls(task, list(bases), list(zs), [list(t) for t in targets])

    @cached_property
    def rows(self) -> list[list[int]]:
        """Each example's tokens as a list (no torch: what a page shows)."""
        task, rows = self.task, []
        for g, b in enumerate(self.bases):
            for i, a in enumerate(self.targets[g]):
                src, tgt = (a, b) if task.direction.startswith("a") else (b, a)
                row = [BOS, *encode(src), SEP]
                if task.has_z:
                    row += [*encode(self.selector(g, i)), SEP]
                rows.append(row + encode(tgt) + [EOS])
        return rows

    @cached_property
    def tokens(self) -> Int[torch.Tensor, "examples seq"]:
        return torch.tensor(self.rows, dtype=torch.long)

    @cached_property
    def group(self) -> Int[torch.Tensor, " examples"]:
        """Each example's base."""
        return torch.arange(self.task.n_bases).repeat_interleave(self.task.k)

    @cached_property
    def choice(self) -> Int[torch.Tensor, " examples"]:
        """Each example's target's index among its base's K."""
        return torch.arange(self.task.k).repeat(self.task.n_bases)

    def selector(self, g: int, i: int) -> str:
        """The i-th selector of base g (its super-group's)."""
        return self.zs[(g % self.task.z_groups) * self.task.k + i]

    @property
    def loss_mask(self) -> Bool[torch.Tensor, " predictions"]:
        """Over next-token predictions (seq - 1): True where the target is an A token or EOS."""
        mask = torch.zeros(self.task.seq_len - 1, dtype=torch.bool)
        mask[self.task.first_target_pos :] = True
        return mask

    @cached_property
    def candidates(self) -> Int[torch.Tensor, "bases k target_eos"]:
        """Each group's K targets with EOS (target_length + 1 tokens), as tokens."""
        t = self.task
        return self.tokens[:, t.source_length :].reshape(t.n_bases, t.k, t.target_length + 1)

    def to_json(self) -> dict:
        return {"bases": self.bases, "zs": self.zs, "targets": self.targets}
