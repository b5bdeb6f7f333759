"""The evaluation set: whole groups of the task (a base with all its K examples), seeded, with
each example's candidates and a z-deranged copy of its prefix (docs/science.md section 3)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor

from selector_lens.errors import SelectorLensError
from selector_lens.task.data import TaskData

if TYPE_CHECKING:  # the task makes its eval set (`SelectorTask.eval_set`): no import back
    from selector_lens.task.selector import SelectorTask

# 100 groups (1,000 examples at K=10): exact scoring of all K candidates costs ~0.15 of the
# FLOPs of the 50 training steps between evals; 200 groups would cost 0.30 (benchmarks/).
DEFAULT_EVAL_GROUPS = 100


@dataclass
class EvalSet:
    """Fixed, seeded evaluation examples: whole groups (a base with all its K examples)."""

    task: SelectorTask
    groups: Int[Tensor, " groups"]  # base indices, sorted
    tokens: Int[Tensor, "n seq"]  # clean sequences, group-major
    deranged: Int[Tensor, "n source"] | None  # prefixes with z deranged (None: no z, or K = 1)
    candidates: Int[Tensor, "n cands target_eos"]  # the example's candidate targets + EOS
    correct: Int[Tensor, " n"]  # index of the true target among the candidates
    group_pos: Int[Tensor, " n"]  # index into `groups`


def resolve_eval_groups(spec, n_bases: int) -> int:
    """'auto' (all groups up to 100, else a seeded 100), 'all', or a count."""
    if spec in (None, "auto"):
        return min(n_bases, DEFAULT_EVAL_GROUPS)
    if spec == "all":
        return n_bases
    try:
        n = int(spec)
    except (TypeError, ValueError):
        raise SelectorLensError(
            f"eval_groups must be 'auto', 'all' or a count, got {spec!r}"
        ) from None
    if n < 1:
        raise SelectorLensError(f"eval_groups must be >= 1, got {n}")
    return min(n, n_bases)


def derangement_shifts(n_groups: int, k: int, seed: int) -> np.ndarray:
    """Per group, a shift r in 1..K-1: example i of the group gets z_{(i + r) mod K}.

    A cyclic shift within the group permutes the z's across its examples and leaves no example
    with its own z, so the z marginal stays exact while the (B, z) pairing is destroyed.
    """
    rng = np.random.default_rng(seed)
    return rng.integers(1, k, size=n_groups)


def make_eval_set(data: TaskData, eval_groups="auto", seed: int = 0, groups=None) -> EvalSet:
    """The evaluation set: `groups` (base indices, e.g. a run's recorded ones) or a seeded draw."""
    task = data.task
    if groups is not None:
        groups = torch.as_tensor(sorted(groups), dtype=torch.long)
        n = len(groups)
    elif (n := resolve_eval_groups(eval_groups, task.n_bases)) == task.n_bases:
        groups = torch.arange(task.n_bases)
    else:
        rng = np.random.default_rng(seed)
        groups = torch.from_numpy(np.sort(rng.choice(task.n_bases, size=n, replace=False)))
    idx = (groups[:, None] * task.k + torch.arange(task.k)).reshape(-1)
    tokens = data.tokens[idx]
    group_pos = torch.arange(n).repeat_interleave(task.k)
    choice = data.choice[idx]
    if task.has_candidates:
        candidates = data.candidates[data.group[idx]]
        correct = choice
    else:
        candidates = tokens[:, task.source_length :].unsqueeze(1)
        correct = torch.zeros_like(choice)
    deranged = None
    if task.has_z and task.k > 1:
        shift = torch.from_numpy(derangement_shifts(n, task.k, seed + 1))
        new_choice = (choice + shift[group_pos]) % task.k
        deranged = tokens[:, : task.source_length].clone()
        other = data.group[idx] * task.k + new_choice  # the same base with another selector
        z_tokens = data.tokens[other][:, task.z_positions]
        deranged[:, task.z_positions] = z_tokens
    return EvalSet(task, groups, tokens, deranged, candidates, correct, group_pos)
