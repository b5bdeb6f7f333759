"""Head ablation through `blocks.L.attn.hook_z`: zero, mean, or resample another example's output.

A `HeadAblation` plugs into `metrics.evaluate(..., intervention=...)`, so ablated metrics are
the same metrics, computed the same way (cached prefix, all K candidates), as the clean ones.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from jaxtyping import Float, Int

from selector_lens.errors import SelectorLensError
from selector_lens.lazy import inference_mode, lazy_module

torch = lazy_module("torch")  # imported on first use: a stored table needs no torch

MODES = ("zero", "mean", "resample")


def check_heads(cfg, heads) -> list[tuple[int, int]]:
    """Validate (layer, head) pairs against a model's config (a HookedTransformerConfig or a
    ModelConfig: no model needed); one clear error if out of range."""
    L, H = cfg.n_layers, cfg.n_heads
    out = []
    for layer, head in heads:
        if not 0 <= layer < L:
            raise SelectorLensError(f"layer {layer} out of range: the model has layers 0..{L - 1}")
        if not 0 <= head < H:
            raise SelectorLensError(f"head {head} out of range: the model has heads 0..{H - 1}")
        out.append((int(layer), int(head)))
    return out


def head_label(layer: int, head: int) -> str:
    return f"L{layer}H{head}"


def parse_head(label: str, cfg) -> tuple[int, int]:
    """'L0H3' -> (0, 3), checked against `cfg` (as `check_heads`): `head_label`'s inverse."""
    import re

    m = re.fullmatch(r"L(\d+)H(\d+)", str(label).strip().upper())
    if not m:
        raise SelectorLensError(f"a head is written L<layer>H<head>, e.g. L0H3; got {label!r}")
    return check_heads(cfg, [(int(m.group(1)), int(m.group(2)))])[0]


@dataclass
class HeadAblation:
    """Replace the outputs (hook_z) of `heads` in every forward pass of an evaluation (an
    `metrics.Intervention`).

    mode "zero": no values. "mean": `values[(layer, head)]` is the head's mean output at each
    position over the evaluation set. "resample": row e holds the output, on the clean run, of
    the example that replaces e.
    """

    heads: list[tuple[int, int]]
    mode: str
    values: dict[
        tuple[int, int], Float[torch.Tensor, "seq d_head"] | Float[torch.Tensor, "n seq d_head"]
    ] = field(default_factory=dict, repr=False)

    @property
    def per_example(self) -> bool:
        """Resampling differs per example; zero and mean act alike on a group's shared prefix."""
        return self.mode == "resample"

    def replaced_layers(self, n_heads: int) -> set[int]:
        """The layers all of whose heads are ablated: nothing of their attention survives."""
        counts = Counter(layer for layer, _ in set(self.heads))
        return {layer for layer, n in counts.items() if n == n_heads}

    def hooks(
        self, examples: Int[torch.Tensor, " rows"], offset: int
    ) -> list[tuple[str, Callable]]:
        by_layer = defaultdict(list)
        for layer, head in self.heads:
            by_layer[layer].append(head)

        def make(layer, heads):
            def hook(
                z: Float[torch.Tensor, "rows pos head d_head"], hook
            ) -> Float[torch.Tensor, "rows pos head d_head"]:
                pos = slice(offset, offset + z.shape[1])
                for h in heads:
                    if self.mode == "zero":
                        z[:, :, h] = 0.0
                    elif self.mode == "mean":
                        z[:, :, h] = self.values[(layer, h)][pos].to(z.device)
                    else:
                        z[:, :, h] = self.values[(layer, h)][examples, pos].to(z.device)
                return z

            return hook

        return [(f"blocks.{layer}.attn.hook_z", make(layer, hs)) for layer, hs in by_layer.items()]


@inference_mode
def head_ablation(
    model, es, heads, mode: str = "mean", seed: int = 0, chunk: int = 1024
) -> HeadAblation:
    """Build the ablation of `heads` for evaluation set `es` (means / resamples from its clean run)."""
    if mode not in MODES:
        raise SelectorLensError(f"unknown ablation mode {mode!r}; choose one of {', '.join(MODES)}")
    heads = check_heads(model.cfg, heads)
    if not heads:
        raise SelectorLensError("no heads to ablate")
    abl = HeadAblation(heads, mode)
    if mode == "zero":
        return abl
    from selector_lens.model import fused

    acts = defaultdict(list)
    device = next(model.parameters()).device

    def keep(z, hook):
        for layer, head in heads:
            if layer == hook.layer():
                acts[(layer, head)].append(z[:, :, head].cpu())

    hooks = [
        (f"blocks.{layer}.attn.hook_z", keep) for layer in sorted({layer for layer, _ in heads})
    ]
    for lo in range(0, len(es.tokens), chunk):
        fused.forward(
            model, es.tokens[lo : lo + chunk].to(device), fwd_hooks=hooks, positions=slice(0, 0)
        )
    n = len(es.tokens)
    source = resample_sources(n, seed)
    for key, parts in acts.items():
        full = torch.cat(parts)  # [N, seq, d_head]
        abl.values[key] = full.mean(0) if mode == "mean" else full[source]
    return abl


def resample_sources(n: int, seed: int) -> torch.Tensor:
    """For each example, another example to take activations from (never itself when n > 1)."""
    if n == 1:
        return torch.zeros(1, dtype=torch.long)
    perm = np.random.default_rng(seed).permutation(n)
    fixed = perm == np.arange(n)
    perm[fixed] = (perm[fixed] + 1) % n
    return torch.from_numpy(perm)


METRICS = ("loss", "first_target_loss", "candidate_loss", "candidate_acc", "dz")


def metric_names(run) -> tuple[str, ...]:
    """The metrics an ablation compares: the selector's METRICS; for another task, those of its
    metrics that its evaluation rows hold as one number (not one per head)."""
    task = run.config.task
    if task.name == "selector":
        return METRICS
    first = next(iter(run.metric_rows()), {})
    return tuple(m for m in task.metrics if isinstance(first.get(m, 0.0), (int, float)))


ABLATION_VERSION = "1"  # bump when the ablation's numbers change: stored tables are then recomputed


def ablate_heads(
    run,
    heads,
    mode: str = "mean",
    steps=None,
    keep_only: bool = False,
    seed: int = 0,
    recompute: bool = False,
):
    """Clean vs ablated metrics at each step, one row per step (a tidy DataFrame).

    `keep_only=True` ablates every head except `heads` (sufficiency). Clean values come from the
    run's metrics.jsonl when that step was evaluated there (same evaluation set), else are computed.
    Kept in the run's analysis store (`store.per_step`); `recompute=True` bypasses it.
    """
    return _stored_table(run, [list(heads)], mode, steps, keep_only, seed, recompute)


def ablate_each_head(
    run,
    steps=None,
    mode: str = "mean",
    keep_only: bool = False,
    seed: int = 0,
    recompute: bool = False,
):
    """`ablate_heads` for every head in turn (necessity), or every head alone kept (sufficiency).
    The heads of one layer share the work of the layers below it (`_ablation_table`)."""
    cfg = run.config.model
    return _stored_table(
        run,
        [[(l, h)] for l in range(cfg.n_layers) for h in range(cfg.n_heads)],
        mode,
        steps,
        keep_only,
        seed,
        recompute,
    )


def _stored_table(run, head_sets, mode, steps, keep_only, seed, recompute):
    from selector_lens.runs.store import per_step

    if mode not in MODES:
        raise SelectorLensError(f"unknown ablation mode {mode!r}; choose one of {', '.join(MODES)}")
    for heads in head_sets:
        check_heads(run.config.model, heads)
    params = {
        "head_sets": [[list(h) for h in hs] for hs in head_sets],
        "mode": mode,
        "keep_only": keep_only,
        "seed": seed,
        "eval_set": "the run's recorded groups",
    }
    return per_step(
        run,
        "ablation",
        ABLATION_VERSION,
        params,
        steps,
        lambda todo: _ablation_table(run, head_sets, mode, todo, keep_only, seed),
        recompute,
    )


def _ablation_table(run, head_sets, mode, steps, keep_only, seed):
    """One row per step x head set. Each checkpoint is loaded once and every head's mean /
    resample source comes from one clean pass. Below its lowest layer l, each set acts as one
    trunk does (clean for necessity; every head ablated for `keep_only`), so one trunk run per
    checkpoint serves them all, and each set runs only from layer l's hook_z on; with
    `keep_only` the layers above l, all ablated, compute no attention for the candidates
    (`metrics.evaluate_branches`; equal to one evaluation per set)."""
    if run.config.task.name != "selector":
        return _task_ablation_table(run, head_sets, mode, steps, keep_only, seed)
    import pandas as pd

    from selector_lens.model.metrics import evaluate, evaluate_branches

    series = run.series(run.steps if steps is None else list(steps))
    model = series.model
    head_sets = [check_heads(model.cfg, heads) for heads in head_sets]
    if not all(head_sets):
        raise SelectorLensError("no heads to ablate")
    every = [(l, h) for l in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)]
    targets = [[x for x in every if x not in hs] if keep_only else hs for hs in head_sets]
    starts = [min(layer for layer, _ in heads) for heads in head_sets]
    es = run.eval_set()
    stored = {r["step"]: r for r in run.metric_rows()}
    rows = []
    for step, model in series:
        clean = stored.get(step) or evaluate(model, es)
        sources = head_ablation(model, es, every, mode, seed).values

        def ablation(heads, sources=sources):
            return HeadAblation(heads, mode, {t: sources[t] for t in heads if t in sources})

        ablated = evaluate_branches(
            model,
            es,
            [ablation(t) for t in targets],
            from_layer=starts,
            trunk=ablation(every) if keep_only else None,
        )
        for i, heads in enumerate(head_sets):
            rows.append(_row(step, heads, mode, keep_only, clean, ablated[i], METRICS))
    return pd.DataFrame(rows)


def _row(step, heads, mode, keep_only, clean: dict, ablated: dict, metrics) -> dict:
    """One ablation table row: the head set, and each metric clean, ablated and their change."""
    row = {
        "step": step,
        "heads": "+".join(head_label(*h) for h in heads),
        "mode": mode,
        "keep_only": keep_only,
    }
    if len(heads) == 1:
        row["layer"], row["head"] = heads[0]
    for m in metrics:
        c, a = clean.get(m), ablated.get(m)
        row[f"clean_{m}"], row[f"ablated_{m}"] = c, a
        row[f"delta_{m}"] = None if c is None or a is None else a - c
    return row


def _task_ablation_table(run, head_sets, mode, steps, keep_only, seed):
    """`_ablation_table` for any task: each head set's ablation through the task's own
    evaluation (`model.evaluation.evaluate`), one evaluation per set."""
    import pandas as pd

    from selector_lens.model.evaluation import evaluate

    task = run.config.task
    if mode == "resample":
        raise SelectorLensError(
            f"resample ablation reads the selector's evaluation rows; use --mode mean or zero "
            f"for the {task.name} task"
        )
    names = metric_names(run)
    es = run.eval_set()
    stored = {r["step"]: r for r in run.metric_rows()}
    rows = []
    for step, model in run.series(run.steps if steps is None else list(steps)):
        every = [(l, h) for l in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)]
        clean = stored.get(step) or evaluate(task, model, es)
        sources = head_ablation(model, es, every, mode, seed).values
        for heads in head_sets:
            heads = check_heads(model.cfg, heads)
            target = [x for x in every if x not in heads] if keep_only else heads
            ablation = HeadAblation(target, mode, {t: sources[t] for t in target if t in sources})
            ablated = evaluate(task, model, es, ablation)
            rows.append(_row(step, heads, mode, keep_only, clean, ablated, names))
    return pd.DataFrame(rows)


TRAINING_ABLATION_VERSION = "1"


def training_set_ablation(
    run, steps, n_examples: int = 2048, seed: int = 0, recompute: bool = False
):
    """The paper's per-head measure: mean-ablate each head's `hook_z` (its mean over the
    examples, position by position) on `n_examples` training examples (the first of a seeded
    `randperm` of the dataset), and report per step x head the change of the training loss (A
    tokens and EOS), of the first-target loss, and of the first-target loss restricted to the
    base's K first characters (`d_cand`). Runs the HookedTransformer itself (`run_with_hooks`).
    Kept in the run's analysis store."""
    from selector_lens.runs.store import per_checkpoint

    params = {"n_examples": n_examples, "seed": seed, "mode": "mean"}
    return per_checkpoint(
        run,
        "training_ablation",
        TRAINING_ABLATION_VERSION,
        params,
        steps,
        lambda: _training_ablation_rows(run, n_examples, seed),
        recompute,
    )


def _training_losses(logits, tokens, task, first_chars) -> dict:
    """Training loss, first-target loss and the first-target loss over the K candidate firsts."""
    first = task.first_target_pos
    logp = logits[:, first:-1].log_softmax(-1)
    target = tokens[:, first + 1 :]
    tok = -logp.gather(-1, target[..., None])[..., 0]
    cand = logits[:, first].gather(-1, first_chars).log_softmax(-1)  # [N, K] over the base's firsts
    correct = (first_chars == target[:, :1]).float().argmax(-1)
    return {
        "loss": tok.mean().item(),
        "first": tok[:, 0].mean().item(),
        "cand": -cand.gather(-1, correct[:, None]).mean().item(),
    }


def _training_ablation_rows(run, n_examples, seed):
    """The paper's per-head measure at one checkpoint, on its seeded training examples."""
    task, data = run.config.task, run.task_data
    idx = torch.randperm(task.n_examples, generator=torch.Generator().manual_seed(seed))[
        :n_examples
    ]
    tokens = data.tokens[idx]
    rows_idx = torch.arange(len(tokens))
    first_chars = data.candidates[data.group[idx], :, 0]  # [N, K] the base's K first target tokens

    @torch.inference_mode()
    def rows_at(step, model):
        logits, cache = model.run_with_cache(
            tokens, names_filter=lambda n: n.endswith("attn.hook_z")
        )
        clean = _training_losses(logits, tokens, task, first_chars)
        rows = []
        for layer in range(model.cfg.n_layers):
            mean = cache[f"blocks.{layer}.attn.hook_z"].mean(0)  # [pos, head, d_head]
            for head in range(model.cfg.n_heads):
                ablation = HeadAblation([(layer, head)], "mean", {(layer, head): mean[:, head]})
                ablated = _training_losses(
                    model.run_with_hooks(tokens, fwd_hooks=ablation.hooks(rows_idx, 0)),
                    tokens,
                    task,
                    first_chars,
                )
                rows.append(
                    {
                        "layer": layer,
                        "head": head,
                        "label": head_label(layer, head),
                        **{f"clean_{k}": v for k, v in clean.items()},
                        **{f"d_{k}": ablated[k] - clean[k] for k in clean},
                    }
                )
        return rows

    return rows_at
