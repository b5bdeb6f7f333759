"""The logit lens across checkpoints: what the residual stream at the a1-predicting position
already says, read through `ln_final` and the unembedding after the embedding and every block
(another task: at each of its focus predictions, `task.protocol.focus`).

TransformerLens's `accumulated_resid` gives the stack (embedding + positions, then each block's
`resid_post`); `ln_final` is applied to each layer's vector afresh (a lens, not the final layer's
cached scale). The last layer's row is the model's own prediction.
"""

from __future__ import annotations

from jaxtyping import Float, Int

from selector_lens.errors import SelectorLensError
from selector_lens.lazy import lazy_module

torch = lazy_module("torch")  # imported on first use: a stored table needs no torch


def a1_resid_stack(
    model, tokens: Int[torch.Tensor, "batch seq"], pos: int
) -> Float[torch.Tensor, "layer batch d_model"]:
    """The residual stream at position `pos` after the embedding and after every block
    (TransformerLens's `accumulated_resid`): what the logit lens and the representation
    statistics read. Causal attention: the tokens after `pos` are not run."""
    from selector_lens.model import fused

    tokens = tokens[:, : pos + 1]
    if not fused.stands_in(model):
        _, cache = model.run_with_cache(
            tokens, names_filter=lambda n: n.endswith(("resid_pre", "resid_post"))
        )
        return cache.accumulated_resid(pos_slice=pos)
    stack = []
    hooks = [
        (f"blocks.{layer}.hook_resid_pre", lambda x, hook: stack.append(x[:, pos]))
        for layer in range(model.cfg.n_layers)
    ]
    last = fused.forward(model, tokens, fwd_hooks=hooks, stop_at_layer=model.cfg.n_layers)
    return torch.stack(stack + [last[:, pos]])


def lens_metrics(
    logits: Float[torch.Tensor, "layer batch vocab"],
    correct: Int[torch.Tensor, " batch"],
    firsts: Int[torch.Tensor, "batch k"],
) -> list[dict]:
    """Per layer: mean P(correct a1), top-1 accuracy, entropy (nats), and the loss of the correct
    a1 among the base's K first characters (the candidate loss restricted to a1)."""
    logp = logits.detach().double().log_softmax(-1)
    rows = []
    for layer, lp in enumerate(logp):
        right = lp.gather(-1, correct[:, None])[:, 0]
        cand = lp.gather(-1, firsts).log_softmax(-1)
        idx = (firsts == correct[:, None]).double().argmax(-1)
        rows.append(
            {
                "layer": layer,
                "p_correct": float(right.exp().mean()),
                "top1": float((lp.argmax(-1) == correct).double().mean()),
                "entropy": float(-(lp.exp() * lp).sum(-1).mean()),
                "candidate_loss": float(-cand.gather(-1, idx[:, None]).mean()),
            }
        )
    return rows


LENS_VERSION = "1"  # bump when the numbers change: stored tables are then recomputed


def logit_lens(run, steps=None, recompute: bool = False):
    """Rows {step, layer, p_correct, top1, entropy, candidate_loss}, per step in layer order
    (layer 0 = the embedding, layer l = after block l - 1), on the run's evaluation set. Kept in
    the run's analysis store (`recompute=True` bypasses it)."""
    from selector_lens.runs.store import per_checkpoint

    task = run.config.task
    if task.name != "selector":
        return per_checkpoint(
            run, "logit_lens", LENS_VERSION, {}, steps, lambda: _task_lens_rows(run), recompute
        )
    if not task.has_candidates:
        raise SelectorLensError(
            f"{run.path} is a {task.direction} run: the logit lens reads the a1 prediction"
        )
    params = {"eval_set": "the run's recorded groups"}
    return per_checkpoint(
        run, "logit_lens", LENS_VERSION, params, steps, lambda: _lens_rows(run), recompute
    )


def _lens_rows(run):
    """The lens at one checkpoint, on the run's evaluation set."""
    pos = run.config.task.first_target_pos
    es = run.eval_set()
    correct, firsts = es.tokens[:, pos + 1], es.candidates[:, :, 0]

    @torch.inference_mode()
    def rows_at(step, model):
        logits = model.unembed(model.ln_final(a1_resid_stack(model, es.tokens, pos)))
        return lens_metrics(logits, correct, firsts)

    return rows_at


def _task_lens_rows(run):
    """Any task's lens: per layer, at its focus predictions, P(correct next token), top-1,
    entropy and the loss (`loss`; the last layer's is the model's own focus loss)."""
    from selector_lens.task.protocol import focus

    es = run.eval_set()
    tokens, mask = es.tokens, focus(run.config.task, es)
    correct = tokens[:, 1:][mask]

    @torch.inference_mode()
    def rows_at(step, model):
        rows = []
        for lo in range(0, len(tokens), 512):  # [layer, n, seq, d] a chunk at a time
            _, cache = model.run_with_cache(
                tokens[lo : lo + 512],
                names_filter=lambda n: n.endswith(("resid_pre", "resid_post")),
            )
            stack = cache.accumulated_resid()[:, :, :-1][:, mask[lo : lo + 512]]  # [layer, m, d]
            rows.append(model.unembed(model.ln_final(stack[:, :, None]))[:, :, 0])
        logp = torch.cat(rows, 1).double().log_softmax(-1)  # [layer, focus predictions, vocab]
        out = []
        for layer, lp in enumerate(logp):
            right = lp.gather(-1, correct[:, None])[:, 0]
            out.append(
                {
                    "layer": layer,
                    "p_correct": float(right.exp().mean()),
                    "top1": float((lp.argmax(-1) == correct).double().mean()),
                    "entropy": float(-(lp.exp() * lp).sum(-1).mean()),
                    "loss": float(-right.mean()),
                }
            )
        return out

    return rows_at
