"""Loss geometry from Hessian-vector products (docs/science.md claim 5).

The loss is the training loss (target tokens and EOS) on a fixed, seeded subsample of the
training set; its size is a parameter and goes into every result, because curvature estimates
depend on it. λmax comes from power iteration, λmin (and a second λmax) from Lanczos with full
reorthogonalisation; the top Lanczos eigenvectors then say which share of the minibatch gradient
noise lies along the high-curvature directions. Products go through the HookedTransformer's own
forward (double backward), so the geometry is that of the reference model.
"""

from __future__ import annotations

import math

from selector_lens.errors import SelectorLensError
from selector_lens.lazy import lazy_module

torch = lazy_module("torch")  # imported on first use: a stored table needs no torch

DEFAULT_SAMPLE = 512


def subsample(n_examples: int, size: int, seed: int) -> torch.Tensor:
    """A fixed, seeded set of example indices (all of them if size >= n_examples)."""
    if size < 1:
        raise SelectorLensError(f"the landscape sample size must be >= 1, got {size}")
    if size >= n_examples:
        return torch.arange(n_examples)
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(n_examples, generator=g)[:size].sort().values


def target_loss(model, tokens: torch.Tensor, first: int) -> torch.Tensor:
    """The training loss: next-token cross-entropy on the target tokens and EOS."""
    logits = model(tokens)[:, first:-1]
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), tokens[:, first + 1 :].reshape(-1)
    )


ESTIMATORS = ("lanczos", "shifted-power")  # ours (the default), the paper code's
CHUNK = 2048  # examples per double-backward graph: all 10,000 of the paper's K = 10 at once need > 23 GB


class Curvature:
    """Hessian-vector products of a loss with respect to `params` (flat vectors). The loss is
    `loss_fn()`, or a list of (weight, loss_fn) parts whose weighted sum it is: each product,
    value and gradient then runs part by part, so memory holds one part's graph."""

    def __init__(self, params, loss_fn):
        self.params = [p for p in params if p.requires_grad]
        self.parts = loss_fn if isinstance(loss_fn, list) else [(1.0, loss_fn)]
        self.n = sum(p.numel() for p in self.params)
        self.calls = 0

    def _flat(self, tensors) -> torch.Tensor:
        return torch.cat([t.reshape(-1) for t in tensors])

    def _split(self, v: torch.Tensor):
        out, i = [], 0
        for p in self.params:
            out.append(v[i : i + p.numel()].view_as(p))
            i += p.numel()
        return out

    def value_and_gradient(self, loss_fn=None) -> tuple[float, torch.Tensor]:
        """The loss and its gradient (of `loss_fn`, a minibatch's, when given)."""
        value, grad = 0.0, None
        for w, fn in [(1.0, loss_fn)] if loss_fn else self.parts:
            loss = fn()
            g = self._flat(torch.autograd.grad(loss, self.params)).detach()
            value += w * float(loss.detach())
            grad = g * w if grad is None else grad.add_(g, alpha=w)
        return value, grad

    def gradient(self, loss_fn=None) -> torch.Tensor:
        return self.value_and_gradient(loss_fn)[1]

    def hvp(self, v: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        vs, out = self._split(v), None
        for w, fn in self.parts:
            grads = torch.autograd.grad(fn(), self.params, create_graph=True)
            hv = self._flat(torch.autograd.grad(grads, self.params, grad_outputs=vs)).detach()
            out = hv * w if out is None else out.add_(hv, alpha=w)
        return out


def power_iteration(
    curv: Curvature, iters: int = 30, seed: int = 0, shift: float = 0.0, tol: float = 1e-4
):
    """Dominant eigenvalue of H - shift I (and its vector) by power iteration."""
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(curv.n, generator=g)
    v /= v.norm()
    lam = 0.0
    for _ in range(iters):
        w = curv.hvp(v) - shift * v
        new = float(v @ w)
        norm = w.norm()
        if norm == 0:
            return 0.0, v
        v = w / norm
        if abs(new - lam) <= tol * max(abs(new), 1e-12):
            lam = new
            break
        lam = new
    return lam + shift, v


def _paper_power(curv: Curvature, shift: float, iters: int, seed: int, stop: bool):
    """The paper code's power iteration on H - shift I: v·Hv recorded before each step, stopped
    (with `stop`) once consecutive vectors align (|cos| > 0.9999) after iteration 10. Returns
    the estimate after each Hessian-vector product."""
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(curv.n, generator=g)
    v /= v.norm()
    by_iter = []
    for i in range(iters):
        w = curv.hvp(v) - shift * v
        by_iter.append(float(v @ w) + shift)
        norm = w.norm()
        if norm < 1e-12:
            break
        new = w / norm
        aligned = abs(float(v @ new)) > 0.9999
        v = new
        if stop and aligned and i > 10:
            break
    return by_iter


def paper_power_max(curv: Curvature, iters: int = 50, seed: int = 0) -> tuple[float, int]:
    """The paper code's λmax (`scripts/posthoc_hessian_eigenvalue.py`): `_paper_power` on H.
    Returns λmax and the products it took."""
    by_iter = _paper_power(curv, 0.0, iters, seed, True)
    return by_iter[-1], len(by_iter)


def shifted_power(
    curv: Curvature, lam_max: float, iters: int = 50, seed: int = 1, stop: bool = True
) -> tuple[float, int, list[float]]:
    """The paper code's λmin: `_paper_power` on H - σI with σ = λmax + 1. On the plateau's
    spectrum (a few large eigenvalues, a bulk near 0) H - σI is nearly -σ I, so consecutive
    vectors are aligned (up to sign) from the start: the stop fires at its first chance and
    λmin is the Rayleigh quotient of a nearly random vector, near the spectrum's mean
    (tests/unit/analysis/test_landscape.py). Returns λmin, the products it took, and the
    estimate after each of them."""
    by_iter = _paper_power(curv, lam_max + 1.0, iters, seed, stop)
    return by_iter[-1], len(by_iter), by_iter


def lanczos(curv: Curvature, iters: int = 30, seed: int = 0):
    """Ritz values (ascending) and vectors [k, n] of H from `iters` Lanczos steps with full
    reorthogonalisation: the extreme ones converge first, both ends at once. Also the k x k
    tridiagonal T (float64), whose leading blocks are what fewer steps would have found."""
    g = torch.Generator().manual_seed(seed)
    m = min(iters, curv.n)
    Q = torch.zeros(m, curv.n, dtype=torch.float64)
    alpha, beta = [], []
    q = torch.randn(curv.n, generator=g, dtype=torch.float64)
    q /= q.norm()
    for j in range(m):
        Q[j] = q
        w = curv.hvp(q.float()).double()
        a = float(q @ w)
        w -= a * q + (beta[-1] * Q[j - 1] if j else 0)
        w -= Q[: j + 1].T @ (Q[: j + 1] @ w)  # full reorthogonalisation, twice is enough
        w -= Q[: j + 1].T @ (Q[: j + 1] @ w)
        alpha.append(a)
        b = float(w.norm())
        if j == m - 1 or b < 1e-10:
            break
        beta.append(b)
        q = w / b
    k = len(alpha)
    T = torch.diag(torch.tensor(alpha, dtype=torch.float64))
    if k > 1:
        off = torch.tensor(beta[: k - 1], dtype=torch.float64)
        T += torch.diag(off, 1) + torch.diag(off, -1)
    vals, vecs = torch.linalg.eigh(T)
    return vals, (vecs.T @ Q[:k]).float(), T


def ritz_extremes(T: torch.Tensor) -> tuple[list[float], list[float]]:
    """λmin and λmax after each Lanczos step m = 1..k: the extreme eigenvalues of T's leading m x m
    block. By interlacing they move outward with m; where they stop moving, more steps would not
    change them (a convergence check for free: no further Hessian-vector products)."""
    ends = [torch.linalg.eigvalsh(T[:m, :m]) for m in range(1, len(T) + 1)]
    return [float(e[0]) for e in ends], [float(e[-1]) for e in ends]


def noise_share(curv: Curvature, directions: torch.Tensor, batch_losses, mean=None) -> dict:
    """Share of the minibatch gradient noise (g_batch - g_sample) along `directions` [k, n]
    (orthonormal), against the share a random k-dimensional subspace would get (k / n).
    `mean`: the subsample's gradient, if the caller has it already."""
    mean = curv.gradient() if mean is None else mean
    along = total = 0.0
    for loss_fn in batch_losses:
        noise = curv.gradient(loss_fn) - mean
        along += float((directions @ noise).pow(2).sum())
        total += float(noise.pow(2).sum())
    return {
        "noise_share_top": along / total if total > 0 else float("nan"),
        "random_share": len(directions) / curv.n,
    }


def _extremes(sample: int, lam_max: float, lam_min: float, loss: float, mean) -> dict:
    """What every landscape row holds, whichever estimator: the extremes, their ratio, and the
    loss and gradient norm on the subsample."""
    return {
        "sample": sample,
        "lambda_max": lam_max,
        "lambda_min": lam_min,
        "ratio": lam_max / abs(lam_min) if lam_min != 0 else math.inf,
        "loss": loss,
        "grad_norm": float(mean.norm()),
    }


def measure(
    model,
    tokens: torch.Tensor,
    first: int,
    sample: int = DEFAULT_SAMPLE,
    seed: int = 0,
    power_iters: int = 30,
    lanczos_iters: int = 30,
    top_k: int = 5,
    noise_batches: int = 8,
    batch_size: int = 128,
    estimator: str = "lanczos",
) -> dict:
    """Curvature at one point: λmax (the larger of power iteration's and Lanczos's estimates, both
    lower bounds), λmin (Lanczos, an upper bound: the true one is at most this), their ratio,
    and the gradient-noise share along the top `top_k` eigen-directions (minibatches of
    `batch_size` drawn, seeded, from the same subsample). `estimator="shifted-power"`: the
    paper code's λmax and λmin instead (`paper_power_max`, `shifted_power`), with their
    iteration counts and λmin after each product; no noise share."""
    if estimator not in ESTIMATORS:
        raise SelectorLensError(
            f"unknown estimator {estimator!r}; choose one of {', '.join(ESTIMATORS)}"
        )
    idx = subsample(len(tokens), sample, seed)
    x = tokens[idx]
    parts = [  # the mean loss over x, as weighted means over chunks of it
        (len(c) / len(x), lambda c=c: target_loss(model, c, first)) for c in x.split(CHUNK)
    ]
    curv = Curvature(model.parameters(), parts)
    if estimator == "shifted-power":
        lam_max, iters_max = paper_power_max(curv, seed=seed)
        lam_min, iters_min, by_iter = shifted_power(curv, lam_max, seed=seed + 1)
        return {
            **_extremes(len(x), lam_max, lam_min, *curv.value_and_gradient()),
            "estimator": estimator,
            "iters_max": iters_max,
            "iters_min": iters_min,
            "hvps": curv.calls,
            "lambda_min_by_iter": by_iter,
        }
    lam_power, _ = power_iteration(curv, power_iters, seed)
    vals, vecs, T = lanczos(curv, lanczos_iters, seed + 1)
    low, high = ritz_extremes(T)
    lam_min, lam_lanczos = float(vals[0]), float(vals[-1])
    lam_max = max(
        lam_power, lam_lanczos
    )  # both are Rayleigh quotients: the larger is nearer the truth
    g = torch.Generator().manual_seed(seed + 2)
    batches = [
        x[torch.randint(len(x), (min(batch_size, len(x)),), generator=g)]
        for _ in range(noise_batches)
    ]
    top = vecs[torch.argsort(vals, descending=True)[: max(1, min(top_k, len(vals)))]]
    loss, mean = curv.value_and_gradient()
    share = noise_share(
        curv, top, [(lambda b=b: target_loss(model, b, first)) for b in batches], mean
    )
    return {
        **_extremes(len(x), lam_max, lam_min, loss, mean),
        "lambda_max_power": lam_power,
        "lambda_max_lanczos": lam_lanczos,
        "top_k": len(top),
        "noise_batch": batches[0].shape[0],
        **share,
        "hvps": curv.calls,
        "lambda_min_by_step": low,  # Lanczos's λmin after 1, 2, ... steps
        "lambda_max_by_step": high,
    }


LANDSCAPE_VERSION = "1"  # bump when the numbers change: stored tables are then recomputed


def landscape(
    run, steps=None, sample: int = DEFAULT_SAMPLE, seed: int = 0, recompute: bool = False, **kw
):
    """`measure` at each selected checkpoint of a run (default: the phases); one row per step,
    kept in the run's analysis store (`recompute=True` bypasses it)."""
    from selector_lens.runs.store import per_checkpoint

    if steps is None:
        steps = sorted(set(run.phases().values()))
    if sample < 1:
        raise SelectorLensError(f"the landscape sample size must be >= 1, got {sample}")
    cfg = run.config

    def make_rows():
        tokens = run.task_data.tokens

        def rows_at(step, model):
            with torch.enable_grad():
                row = measure(
                    model,
                    tokens,
                    cfg.task.loss_start,  # the selector's: its first target
                    sample,
                    seed,
                    batch_size=cfg.batch_size,
                    **kw,
                )
            return [row]

        return rows_at

    params = {"sample": min(sample, cfg.task.n_examples), "seed": seed, **kw}
    return per_checkpoint(
        run, "landscape", LANDSCAPE_VERSION, params, list(steps), make_rows, recompute
    )
