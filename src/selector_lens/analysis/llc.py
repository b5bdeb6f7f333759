"""The local learning coefficient (LLC) per checkpoint, estimated with devinterp's SGLD.

The LLC (Lau et al. 2023) measures how degenerate the loss is around a point: n beta times how
far the tempered, localised posterior's mean loss sits above the point's own. Hoogland et al.
(2024) read developmental stages from its changes across checkpoints. Four choices differ from
devinterp's defaults, each for a reason the calibration test (`tests/integration/test_llc.py`)
shows on models whose learning coefficient is known:

- the loss is the task's training loss (the predictions from `loss_start` on, weighted as the
  trainer weights them), not every position's next-token loss;
- each minibatch's loss is read minus the same minibatch's loss at the checkpoint (a paired
  difference: the SGLD step is unchanged, since the checkpoint's term has no gradient, and the
  batch-to-batch noise leaves the estimate; unpaired, a linear regression with d = 2 read 0.84
  for 1.0, with 8 chains sharing their batches, or 0.97 +- 1.35 with their own);
- the estimate averages the draws after the burn-in only (devinterp's `compute_llc` averages every
  step, burn-in included);
- a burn-in, a localisation of 1 (devinterp's default is 0: no pull back) and each chain its own
  batches, so the chains' spread is the estimate's.

devinterp is an optional extra (`pip install selector-lens[slt]`); without it, one clear line.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import asdict, dataclass

import numpy as np

from selector_lens.errors import SelectorLensError
from selector_lens.lazy import lazy_module

torch = lazy_module("torch")  # imported on first use: a stored table needs no torch


STEP = 0.1  # the default epsilon x n_beta: SGLD's pull per step is epsilon n_beta / 2 x the
# loss's curvature, so this product, not epsilon, is what carries from one model to another (the
# toy models at n = 1,000 and the paper's transformers at n = 10,000 settle at the same one)


@dataclass(frozen=True)
class LLCSettings:
    """The SGLD sampler's settings. `n_beta` None: n / log n, n the training examples."""

    lr: float | None = None  # the SGLD step (devinterp's lr, epsilon); None: STEP / n_beta
    n_beta: float | None = None  # the inverse temperature times n
    localization: float = 1.0  # gamma: the pull back to the checkpoint (devinterp's default: 0)
    chains: int = 4
    draws: int = 1000
    burn_in: int = 200
    batch_size: int = 256
    seed: int = 0

    def __post_init__(self):
        if (
            (self.lr is not None and self.lr <= 0)
            or self.chains < 1
            or self.draws < 1
            or self.burn_in < 0
        ):
            raise SelectorLensError("the LLC needs lr > 0, chains >= 1, draws >= 1, burn_in >= 0")
        if self.batch_size < 1 or self.localization < 0:
            raise SelectorLensError("the LLC needs batch_size >= 1 and localization >= 0")


def _devinterp():
    try:
        from datasets import Dataset
        from devinterp.slt.sampling import sample
    except ImportError:
        raise SelectorLensError(
            "the LLC is estimated with devinterp: pip install 'selector-lens[slt]'"
        ) from None
    return Dataset, sample


def estimate(model, tokens, loss_fn, n: int, settings: LLCSettings = LLCSettings()) -> dict:
    """The LLC of `model` at its current weights: `loss_fn(model, input_ids)` -> the per-token
    loss [batch, seq - 1] on rows of `tokens` (what devinterp samples on), `n` the examples the
    loss stands for. Returns the mean over chains and their spread, each chain's estimate, the
    paired loss trace (n beta x, thinned), its drift (the last quarter of the draws minus the
    first, in the estimate's units: beyond three standard errors, the chains have not settled)
    and `flags` naming what a reader should check."""
    Dataset, sample = _devinterp()
    import copy
    import warnings

    s = settings
    n_beta = s.n_beta if s.n_beta is not None else n / math.log(n)
    lr = s.lr if s.lr is not None else STEP / n_beta
    anchor = copy.deepcopy(model).requires_grad_(False)  # the checkpoint, frozen

    def paired(m, input_ids):  # each batch's loss minus its loss at the checkpoint: the same
        with torch.no_grad():  # gradient, and no batch-to-batch noise in the estimate
            at_anchor = loss_fn(anchor, input_ids)
        return loss_fn(m, input_ids) - at_anchor

    dataset = Dataset.from_dict({"input_ids": tokens.tolist()}).with_format("torch")
    t = time.perf_counter()
    from devinterp.slt import sampler

    bar = sampler.trange  # devinterp draws a progress bar per chain: this one is silent
    sampler.trange = functools.partial(bar, disable=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = sample(
                model=model,
                dataset=dataset,
                observables={},
                lr=lr,
                n_beta=n_beta,
                num_chains=s.chains,
                num_draws=s.draws,
                num_burnin_steps=s.burn_in,
                batch_size=min(s.batch_size, len(tokens)),
                localization=s.localization,
                init_seed=s.seed,
                device="cpu",
                loss_fn=paired,
                match_sampling_input_ids_across_chains=False,
            )
    finally:
        sampler.trange = bar
    ds = tree.dataset
    trace = ds.sampling_loss_micro.mean(dim=["batch_sampling", "token_pos"]).values  # [chain, step]
    init = float(ds.init_loss.values.mean())
    draws = trace[:, s.burn_in :]
    per_chain = n_beta * (draws.mean(1) - init)  # init: the paired loss at the checkpoint, 0
    quarter = max(1, draws.shape[1] // 4)
    drift = n_beta * float(draws[:, -quarter:].mean() - draws[:, :quarter].mean())
    mean, std = float(per_chain.mean()), float(per_chain.std())
    flags = []
    if not np.isfinite(trace).all():
        flags.append("non-finite loss: lower lr")
    if mean < 0:
        flags.append("negative estimate: the checkpoint is not a local minimum at this scale")
    if abs(drift) > 8.5 * std / math.sqrt(
        len(per_chain)
    ):  # 3 standard errors of a quarter's change
        flags.append("the chains have not settled: more burn-in, or lower lr")
    return {
        "llc": mean,
        "llc_std": std,
        "llc_per_chain": per_chain.tolist(),
        "drift": drift,
        "n_beta": n_beta,
        "lr": lr,
        "trace": (n_beta * draws.mean(0)[:: max(1, draws.shape[1] // 50)]).tolist(),
        "flags": flags,
        "seconds": time.perf_counter() - t,
    }


def task_loss_fn(task):
    """devinterp's per-token loss for a task: the next-token loss at the trainer's positions
    (`loss_start` to the end), the rest zero and the read ones scaled so that devinterp's mean
    over all positions is the trainer's mean over its own."""
    start = task.loss_start

    def loss_fn(model, input_ids):
        logits = model(input_ids)[:, :-1]
        losses = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), input_ids[:, 1:].flatten(), reduction="none"
        ).view(input_ids.shape[0], -1)
        width = losses.shape[1]
        weight = torch.zeros(width)
        weight[start:] = width / (width - start)
        return losses * weight

    return loss_fn


LLC_VERSION = "1"


def llc(run, steps=None, settings: LLCSettings = LLCSettings(), recompute: bool = False):
    """The LLC at each checkpoint of a run (default: every one), on its training set with its
    task's own loss: a DataFrame step x (llc, llc_std, drift, flags, seconds, ...). Kept in the
    run's analysis store, keyed by the sampler's settings."""
    import pandas as pd

    from selector_lens.runs.store import per_checkpoint

    _devinterp()  # one clear line before any work

    def make_rows():
        tokens = run.task_data.tokens
        loss_fn = task_loss_fn(run.config.task)

        def rows_at(step, model):
            out = estimate(model, tokens, loss_fn, len(tokens), settings)
            out["flags"] = "; ".join(out["flags"])
            return [out]

        return rows_at

    table = per_checkpoint(
        run,
        "llc",
        LLC_VERSION,
        asdict(settings),
        run.steps if steps is None else steps,
        make_rows,
        recompute,
    )
    table = pd.DataFrame(table)
    if "lr" not in table:  # rows stored before the step was recorded: always an explicit lr
        table["lr"] = settings.lr
    return table
