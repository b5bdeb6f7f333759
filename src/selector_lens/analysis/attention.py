"""Attention tracking across checkpoints: mass on z, entropy, full patterns.

The a1-query attention to z is stored at every eval in metrics.jsonl, so `attention_to_z` reads
it from there; other queries (all target-predicting positions) and entropies are computed from
the checkpoints, one model loaded in place.
"""

from __future__ import annotations

import torch

from selector_lens.errors import SelectorLensError

QUERIES = ("a1", "target")


def _require_z(run) -> None:
    if not run.config.task.has_z:
        raise SelectorLensError(
            f"{run.path} is a {run.config.task.direction} run: it has no z to attend to"
        )


def attention_to_z(run, steps=None, query: str = "a1"):
    """DataFrame step x layer x head: attention mass onto the z positions.

    query 'a1': from the position that predicts a1 (read from the stored metrics when `steps`
    is None: every eval step). query 'target': averaged over every target-predicting position,
    with the attention entropy (nats) of those queries, computed from checkpoints.
    """
    import pandas as pd

    _require_z(run)
    if query not in QUERIES:
        raise SelectorLensError(f"unknown query {query!r}; choose one of {', '.join(QUERIES)}")
    if query == "a1" and steps is None:
        rows = [
            {"step": r["step"], "layer": l, "head": h, "attn_to_z": v}
            for r in run.metric_rows()
            for l, per_head in enumerate(r["attn_to_z"])
            for h, v in enumerate(per_head)
        ]
        return pd.DataFrame(rows)
    task = run.config.task
    first = task.first_target_pos
    queries = [first] if query == "a1" else list(range(first, task.seq_len - 1))
    tokens = run.eval_set().tokens
    rows = []
    for step, model in run.series(run.steps if steps is None else steps):
        pats = attention_patterns(model, tokens)  # [L, H, q, k], mean over examples
        for l in range(pats.shape[0]):
            for h in range(pats.shape[1]):
                p = pats[l, h, queries]  # [q, k]
                ent = -(p.clamp_min(1e-12).log() * p).sum(-1).mean().item()
                rows.append(
                    {
                        "step": step,
                        "layer": l,
                        "head": h,
                        "attn_to_z": p[:, task.z_positions].sum(-1).mean().item(),
                        "entropy": ent,
                    }
                )
    return pd.DataFrame(rows)


@torch.inference_mode()
def attention_patterns(model, tokens: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
    """[n_layers, n_heads, query, key] attention pattern, averaged over the rows of `tokens`.

    Pass a single example (tokens[i:i+1]) for its own pattern. Note that the entropy of an
    average pattern is not the average entropy; `attention_to_z` computes the former.
    """
    L = model.cfg.n_layers
    names = {f"blocks.{l}.attn.hook_pattern" for l in range(L)}
    total = None
    device = next(model.parameters()).device
    for lo in range(0, len(tokens), chunk):
        _, cache = model.run_with_cache(
            tokens[lo : lo + chunk].to(device), names_filter=lambda n: n in names
        )
        part = torch.stack([cache[f"blocks.{l}.attn.hook_pattern"].sum(0) for l in range(L)]).cpu()
        total = part if total is None else total + part
    return total / len(tokens)


EXPLORER_VERSION = "1"


def example_patterns(run, steps, example: int = 0, recompute: bool = False) -> dict:
    """{step: [layer, head, query, key] attention pattern of one example} at each step (the
    dashboard's attention explorer), kept in the run's analysis store."""
    import numpy as np

    from selector_lens.runs.store import per_checkpoint

    n = run.config.task.n_examples
    if not 0 <= example < n:
        raise SelectorLensError(f"example {example} out of range: the run has examples 0..{n - 1}")

    def make_rows():
        tokens = run.task_data.tokens[example : example + 1]
        return lambda step, model: [{"pattern": attention_patterns(model, tokens).tolist()}]

    params = {"example": example}
    table = per_checkpoint(
        run, "attention_explorer", EXPLORER_VERSION, params, steps, make_rows, recompute
    )
    return {int(r.step): np.asarray(r.pattern) for r in table.itertuples()}
