"""Dense evaluation over whole groups (science.md section 3), batched.

One pass per chunk of examples: the shared prefix (BOS .. SEP) runs once with a key-value
cache, clean and z-deranged together; the cache is then repeated for the K candidates, so each
candidate costs only its own target tokens. Everything else (loss on A tokens and EOS, token
accuracy, first-target loss, attention to z) falls out of those two forward passes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .errors import SelectorLensError
from .task import SelectorTask, TaskData

DEFAULT_EVAL_GROUPS = 200  # the paper's per-group analysis used 200 groups


@dataclass
class EvalSet:
    """Fixed, seeded evaluation examples: whole groups (a base with all its K examples)."""

    task: SelectorTask
    groups: torch.Tensor  # [G] base indices, sorted
    tokens: torch.Tensor  # [N, seq] clean sequences, group-major
    deranged: torch.Tensor | None  # [N, source_length] prefixes with z deranged, or None
    candidates: torch.Tensor  # [N, C, target_length + 1] the example's candidate targets + EOS
    correct: torch.Tensor  # [N] index of the true target among the candidates
    group_pos: torch.Tensor  # [N] index into `groups`


def resolve_eval_groups(spec, n_bases: int) -> int:
    """'auto' (all up to 200 groups, else 200), 'all', or a count."""
    if spec in (None, "auto"):
        return min(n_bases, DEFAULT_EVAL_GROUPS)
    if spec == "all":
        return n_bases
    try:
        n = int(spec)
    except (TypeError, ValueError):
        raise SelectorLensError(f"eval_groups must be 'auto', 'all' or a count, got {spec!r}") from None
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


def make_eval_set(data: TaskData, eval_groups="auto", seed: int = 0) -> EvalSet:
    task = data.task
    n = resolve_eval_groups(eval_groups, task.n_bases)
    if n == task.n_bases:
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
        z_tokens = data.tokens[new_choice][:, task.z_positions]  # example i of group 0 carries z_i
        deranged[:, task.z_positions] = z_tokens
    return EvalSet(task, groups, tokens, deranged, candidates, correct, group_pos)


def _expand_cache(cache, n: int, c: int):
    """The first n rows of a prefix cache, each repeated c times, frozen for the candidates."""
    from transformer_lens import TransformerLensKeyValueCache, TransformerLensKeyValueCacheEntry

    entries = [
        TransformerLensKeyValueCacheEntry(
            e.past_keys[:n].repeat_interleave(c, 0), e.past_values[:n].repeat_interleave(c, 0), frozen=True
        )
        for e in cache.entries
    ]
    mask = cache.previous_attention_mask[:n].repeat_interleave(c, 0)
    return TransformerLensKeyValueCache(entries, mask, frozen=True)


@torch.inference_mode()
def evaluate(model, es: EvalSet, max_rows: int = 1024, intervention=None) -> dict:
    """All per-eval metrics of science.md section 3 on `es`; undefined ones are None.

    `intervention` (e.g. a head ablation) has `hooks(examples, offset) -> fwd_hooks`: the
    TransformerLens hooks for a forward pass whose rows are those eval examples and whose
    first position is `offset` (0 for the prefix pass, source_length for the candidates).
    """
    from transformer_lens import TransformerLensKeyValueCache

    task, device = es.task, next(model.parameters()).device
    S, T, C = task.source_length, task.target_length, es.candidates.shape[1]
    N, L, H = len(es.tokens), model.cfg.n_layers, model.cfg.n_heads
    zpos = task.z_positions
    chunk = max(1, max_rows // max(C, 2))

    tot = dict(loss=0.0, first=0.0, first_shuf=0.0, cand=0.0, cand_ok=0, tok_ok=0)
    attn = torch.zeros(L, H, dtype=torch.float64)
    group_correct = torch.zeros(len(es.groups), dtype=torch.long)

    for lo in range(0, N, chunk):
        hi = min(N, lo + chunk)
        n = hi - lo
        prefix = es.tokens[lo:hi, :S]
        inp = prefix if es.deranged is None else torch.cat([prefix, es.deranged[lo:hi]])
        rows_ex = torch.arange(lo, hi)
        hooks = intervention.hooks(rows_ex.repeat(inp.shape[0] // n), 0) if intervention else []
        if zpos:

            def grab(pattern, hook, n=n):
                attn[hook.layer()] += pattern[:n, :, S - 1, zpos].sum((0, 2)).double().cpu()

            hooks += [(f"blocks.{layer}.attn.hook_pattern", grab) for layer in range(L)]
        cache = TransformerLensKeyValueCache.init_cache(model.cfg, device, inp.shape[0])
        inp = inp.to(device)  # no tokenizer: TransformerLens needs the (all-ones) mask with a cache
        logits = model.run_with_hooks(
            inp, past_kv_cache=cache, attention_mask=torch.ones_like(inp), fwd_hooks=hooks
        )
        first_logp = logits[:, -1].float().log_softmax(-1).cpu()  # [n or 2n, V]

        cand = es.candidates[lo:hi]  # [n, C, T+1]
        cand_in = cand[:, :, :T].reshape(n * C, T).to(device)
        rest = model.run_with_hooks(
            cand_in,
            past_kv_cache=_expand_cache(cache, n, C),
            attention_mask=torch.ones_like(cand_in),
            fwd_hooks=intervention.hooks(rows_ex.repeat_interleave(C), S) if intervention else [],
        )
        rest = rest.float().log_softmax(-1).cpu().reshape(n, C, T, -1)
        tok_logp = torch.cat(
            [
                first_logp[:n].gather(-1, cand[:, :, 0]).unsqueeze(-1),
                rest.gather(-1, cand[:, :, 1:].unsqueeze(-1)).squeeze(-1),
            ],
            dim=-1,
        )  # [n, C, T+1]: teacher-forced log-probs of each candidate's tokens
        rows = torch.arange(n)
        correct = es.correct[lo:hi]
        true = cand[rows, correct]  # [n, T+1]
        true_logp = tok_logp[rows, correct]
        tot["loss"] += -true_logp.sum().item()
        tot["first"] += -true_logp[:, 0].sum().item()
        pred = torch.cat([first_logp[:n].argmax(-1, keepdim=True), rest[rows, correct].argmax(-1)], -1)
        tot["tok_ok"] += (pred == true).sum().item()
        if es.deranged is not None:
            tot["first_shuf"] += -first_logp[n:].gather(-1, true[:, :1]).sum().item()
        if task.has_candidates:
            scores = tok_logp.sum(-1)  # [n, C]
            tot["cand"] += -scores.log_softmax(-1)[rows, correct].sum().item()
            ok = scores.argmax(-1) == correct
            tot["cand_ok"] += ok.sum().item()
            group_correct.index_add_(0, es.group_pos[lo:hi], ok.long())

    out = {
        "loss": tot["loss"] / (N * (T + 1)),
        "first_target_loss": tot["first"] / N,
        "token_acc": tot["tok_ok"] / (N * (T + 1)),
        "candidate_loss": tot["cand"] / N if task.has_candidates else None,
        "candidate_acc": tot["cand_ok"] / N if task.has_candidates else None,
        "dz": tot["first_shuf"] / N - tot["first"] / N if es.deranged is not None else None,
        "attn_to_z": (attn / N).tolist() if zpos else None,
        "group_correct": group_correct.tolist() if task.has_candidates else None,
    }
    return out
