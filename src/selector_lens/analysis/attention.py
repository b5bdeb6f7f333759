"""Attention tracking across checkpoints: mass on z, entropy, full patterns, and for any task
the attention to its named positions of interest.

The a1-query attention to z is stored at every eval in metrics.jsonl, so `attention_to_z` reads
it from there; other queries (all target-predicting positions) and entropies are computed from
the checkpoints, one model loaded in place. `attention_to_positions` reads a task's
`position_pairs` (the task protocol), so it serves every task.
"""

from __future__ import annotations

import base64

import numpy as np
from jaxtyping import Float, Int

from selector_lens.errors import SelectorLensError
from selector_lens.lazy import inference_mode, lazy_module

torch = lazy_module("torch")  # imported on first use: a stored table needs no torch

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


POSITIONS_VERSION = "1"


def attention_to_positions(run, steps=None, recompute: bool = False):
    """DataFrame step x layer x head x position: for each of the task's named positions of
    interest, the attention from its query positions to its key positions, averaged over the
    (query, key) pairs of every example of the evaluation set. Kept in the run's store."""
    from selector_lens.runs.store import per_checkpoint
    from selector_lens.task.protocol import position_pairs, require

    task = run.config.task
    require(task, "position_pairs")

    def make_rows():
        es = run.eval_set()
        pairs = position_pairs(task, es)
        rows = torch.arange(len(es.tokens))[:, None]

        def rows_at(step, model):
            totals = {name: 0.0 for name in pairs}
            for lo in range(0, len(es.tokens), 256):
                pats = each_pattern(model, es.tokens[lo : lo + 256])  # [b, L, H, q, k]
                for name, (q, k) in pairs.items():
                    at = pats[rows[: len(pats)], :, :, q[lo : lo + 256], k[lo : lo + 256]]
                    totals[name] = totals[name] + at.sum((0, 1))  # [b, pairs, L, H] -> [L, H]
            return [
                {"layer": l, "head": h, "position": name, "attention": float(v[l, h]) / q.numel()}
                for name, (q, _) in pairs.items()
                for v in [totals[name]]
                for l in range(v.shape[0])
                for h in range(v.shape[1])
            ]

        return rows_at

    steps = run.steps if steps is None else steps
    return per_checkpoint(
        run, "attention_positions", POSITIONS_VERSION, {}, steps, make_rows, recompute
    )


@inference_mode
def each_pattern(
    model, tokens: Int[torch.Tensor, "batch pos"]
) -> Float[torch.Tensor, "batch layer head query key"]:
    """Every example's own attention pattern at every layer and head."""
    L = model.cfg.n_layers
    names = {f"blocks.{l}.attn.hook_pattern" for l in range(L)}
    device = next(model.parameters()).device
    _, cache = model.run_with_cache(tokens.to(device), names_filter=lambda n: n in names)
    return torch.stack([cache[f"blocks.{l}.attn.hook_pattern"] for l in range(L)], 1).cpu()


def attention_patterns(
    model, tokens: Int[torch.Tensor, "batch pos"], chunk: int = 1024
) -> Float[torch.Tensor, "layer head query key"]:
    """The attention pattern averaged over the rows of `tokens`.

    Note that the entropy of an average pattern is not the average entropy; `attention_to_z`
    computes the former.
    """
    total = sum(
        each_pattern(model, tokens[lo : lo + chunk]).sum(0) for lo in range(0, len(tokens), chunk)
    )
    return total / len(tokens)


EXPLORER_VERSION = "2"  # rows: one example's pattern as bytes (v1: one example's, as floats)


def to_bytes(pattern: np.ndarray) -> str:
    """An attention pattern (values in 0..1) as base64 of one byte each, in steps of 1/255: the
    explorer shows colours, and this keeps 16 examples x 12 checkpoints near 1 MB."""
    return base64.b64encode(np.round(np.asarray(pattern) * 255).astype(np.uint8).tobytes()).decode()


def from_bytes(text: str, shape) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), np.uint8).reshape(shape) / 255.0


def explorer_examples(n_examples: int, first: int = 0, count: int = 16) -> list[int]:
    """The examples the attention explorer offers: `first`, then `count - 1` more spread evenly
    over the data (its menu picks among them, with no regeneration)."""
    from selector_lens.runs.steps import thin

    if not 0 <= first < n_examples:
        raise SelectorLensError(
            f"example {first} out of range: the run has examples 0..{n_examples - 1}"
        )
    spread = [e for e in thin(range(n_examples), count) if e != first]
    return [first, *spread[: max(count - 1, 0)]]


def example_patterns(
    run, steps, examples: list[int], recompute: bool = False
) -> tuple[list[int], dict[int, np.ndarray]]:
    """The attention patterns of `examples` (the dashboard's attention explorer), kept in the
    run's analysis store: (examples, {step: [example, layer, head, query, key]}), to 1/255.

    A run published before the explorer held several examples stored its first one alone (as
    floats); that one is served, and the examples returned say so."""
    from selector_lens.runs.store import per_checkpoint

    n = run.config.task.n_examples
    bad = [e for e in examples if not 0 <= e < n]
    if bad:
        raise SelectorLensError(f"example {bad[0]} out of range: the run has examples 0..{n - 1}")
    m, task = run.config.model, run.config.task
    shape = (m.n_layers, m.n_heads, task.seq_len, task.seq_len)

    def make_rows():
        if not run.has_weights:  # before a model is built (TransformerLens imported): seconds
            raise SelectorLensError(f"{run.path}: the explorer's patterns are not stored")
        tokens = run.task_data.tokens[list(examples)]
        return lambda step, model: [
            {"example": e, "pattern": to_bytes(p)}
            for e, p in zip(examples, each_pattern(model, tokens).numpy())
        ]

    try:
        table = per_checkpoint(
            run,
            "attention_explorer",
            EXPLORER_VERSION,
            {"examples": list(examples)},
            steps,
            make_rows,
            recompute,
        )
    except SelectorLensError:
        if run.has_weights:
            raise
        v1 = {"example": examples[0]}  # read, never computed: make_rows refuses without weights
        table = per_checkpoint(run, "attention_explorer", "1", v1, steps, make_rows)
        return examples[:1], {int(r.step): np.asarray(r.pattern)[None] for r in table.itertuples()}
    at = {e: i for i, e in enumerate(examples)}
    out = {}
    for step, rows in table.groupby("step") if len(table) else []:
        rows = sorted(rows.itertuples(), key=lambda r: at[r.example])
        out[int(step)] = np.stack([from_bytes(r.pattern, shape) for r in rows])
    return list(examples), out
