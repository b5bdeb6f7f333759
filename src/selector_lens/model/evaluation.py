"""One evaluation row of any task: the selector's cached passes (`metrics.evaluate`), a task's
own `evaluate`, or, for a task without one, the loss and accuracy of the predictions it trains
on (its `loss_start` to the end)."""

from __future__ import annotations

import torch
from jaxtyping import Bool, Float, Int

from selector_lens.model import fused
from selector_lens.model.metrics import evaluate as selector_evaluate
from selector_lens.task.eval_set import EvalSet


def evaluate(task, model, eval_set, intervention=None) -> dict:
    """`task`'s evaluation row on `eval_set` (`intervention`: hooks for every pass)."""
    if isinstance(eval_set, EvalSet):  # the selector's: every candidate, the z-deranged gap
        return selector_evaluate(model, eval_set, intervention=intervention)
    if hasattr(task, "evaluate"):
        return task.evaluate(model, eval_set, intervention)
    return loss_and_accuracy(model, eval_set.tokens, task.loss_start, intervention)


@torch.inference_mode()
def loss_and_accuracy(model, tokens: torch.Tensor, start: int, intervention=None) -> dict:
    """Next-token loss and accuracy over the predictions from position `start` on."""
    hooks = intervention.hooks(torch.arange(len(tokens)), 0) if intervention else []
    logits = fused.forward(model, tokens, fwd_hooks=hooks, positions=slice(start, -1))
    targets = tokens[:, start + 1 :]
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
    acc = (logits.argmax(-1) == targets).float().mean()
    return {"loss": float(loss), "token_acc": float(acc)}


def focus_loss(
    logits: Float[torch.Tensor, "n seq vocab"],
    tokens: Int[torch.Tensor, "n seq"],
    mask: Bool[torch.Tensor, "n seq_minus_1"],
) -> Float[torch.Tensor, ""]:
    """Mean next-token loss of `tokens` over the predictions `mask` marks (a task's `focus`)."""
    mask = mask.to(logits.device)
    losses = torch.nn.functional.cross_entropy(
        logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten().to(logits.device), reduction="none"
    ).view(mask.shape)
    return losses[mask].mean()
