"""A branch's interventions on training (`training.branch` records them in run.json; the
trainer applies them): frozen heads, the selector's z taken away, ablated heads."""

from __future__ import annotations

import torch

from selector_lens.analysis.ablation import HeadAblation, head_label, parse_head
from selector_lens.config import TrainConfig
from selector_lens.runs.run import Run


def frozen_slices(model, heads) -> list[tuple[torch.nn.Parameter, int, torch.Tensor]]:
    """(parameter, head, its slice now) for each frozen head's W_Q, W_K, W_V, W_O, b_Q, b_K and
    b_V (b_O is shared by the heads): `_RunState` writes them back after every step, so the
    head gets no update, weight decay included."""
    out = []
    for layer, head in heads:
        attn = model.blocks[layer].attn
        for name in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V"):
            p = getattr(attn, name)
            out.append((p, head, p.detach()[head].clone()))
    return out


Z_CHANGES = ("permute", "drop")


def without_z(tokens, index, task, mode: str, seed: int, step: int) -> torch.Tensor:
    """The batch `tokens[index]` with the selector's information taken away (a branch's `z`).
    "permute": each example's z is that of a random example of its own group (base), drawn
    afresh at every step, seeded by the seed and the step (a resumed branch draws the same):
    z no longer says which target follows. "drop": every z token is [PAD]."""
    from selector_lens.task.vocab import PAD

    batch = tokens[index]  # a copy: advanced indexing
    pos = torch.tensor(task.z_positions, device=batch.device)
    if mode == "drop":
        batch[:, pos] = PAD
        return batch
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    pick = torch.randint(task.k, (len(index),), generator=g).to(index.device)
    source = (index // task.k) * task.k + pick
    batch[:, pos] = tokens[source][:, pos]
    return batch


def branch_ablation(run: Run, record: dict, cfg: TrainConfig):
    """A branch's ablated heads (`HeadAblation`, zero or mean) from its run.json record, the
    means read from the values the branch stored when it was made; None without."""
    heads = [parse_head(h, cfg.model) for h in record.get("ablate_heads", [])]
    if not heads:
        return None
    from safetensors.torch import load_file

    mode = record.get("ablate_mode", "mean")
    values = {}
    if mode == "mean":
        stored = load_file(str(run.path / ABLATION_VALUES))
        values = {(layer, head): stored[head_label(layer, head)] for layer, head in heads}
    return HeadAblation(heads, mode, values)


ABLATION_VALUES = "ablation.safetensors"  # a branch's mean head outputs, fixed at the branch
