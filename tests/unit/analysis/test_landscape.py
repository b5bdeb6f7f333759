"""Hessian-vector products, power iteration and Lanczos against the exact Hessian of a small model."""

import pytest
import torch
from torch.func import functional_call

import selector_lens as sl
from selector_lens.analysis import landscape as ls
from tests.helpers import tiny

TASK = sl.SelectorTask(k=3, n_bases=8)
FIRST = TASK.first_target_pos


@pytest.fixture(scope="module")
def small():
    """A 1-layer model with ~600 parameters, its data, and its exact Hessian (float64)."""
    model = sl.build_model(
        sl.ModelConfig(n_layers=1, n_heads=1, d_model=4, d_head=4, d_mlp=8), TASK, 5
    )
    x = TASK.generate().tokens
    names = [n for n, _ in model.named_parameters()]
    shapes = [p.shape for _, p in model.named_parameters()]
    flat0 = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double()

    def loss_of(flat):
        params, i = {}, 0
        for n, s in zip(names, shapes):
            params[n] = flat[i : i + s.numel()].view(s)
            i += s.numel()
        return ls.target_loss(lambda t: functional_call(model.double(), params, (t,)), x, FIRST)

    H = torch.autograd.functional.hessian(loss_of, flat0)
    model.float()
    return model, x, H


def test_hvp_is_the_hessian_times_the_vector(small):
    model, x, H = small
    curv = ls.Curvature(model.parameters(), lambda: ls.target_loss(model, x, FIRST))
    v = torch.randn(curv.n, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(curv.hvp(v).double(), H @ v.double(), atol=1e-5, rtol=1e-3)


def test_a_loss_in_weighted_chunks_has_the_whole_loss_hessian_and_gradient(small):
    """Chunks (what keeps the whole dataset's Hessian in memory) change no number: the products,
    the value and the gradient of the chunked mean are those of the whole mean."""
    model, x, H = small
    whole = ls.Curvature(model.parameters(), lambda: ls.target_loss(model, x, FIRST))
    parts = [(len(c) / len(x), lambda c=c: ls.target_loss(model, c, FIRST)) for c in x.split(7)]
    assert len({len(c) for c in x.split(7)}) == 2  # uneven chunks: the weights matter
    chunked = ls.Curvature(model.parameters(), parts)
    v = torch.randn(chunked.n, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(chunked.hvp(v).double(), H @ v.double(), atol=1e-5, rtol=1e-3)
    (a, ga), (b, gb) = whole.value_and_gradient(), chunked.value_and_gradient()
    assert b == pytest.approx(a, rel=1e-6)
    torch.testing.assert_close(gb, ga, atol=1e-6, rtol=1e-4)


def test_power_iteration_and_lanczos_find_the_extreme_eigenvalues(small):
    model, x, H = small
    eig = torch.linalg.eigvalsh(H)
    curv = ls.Curvature(model.parameters(), lambda: ls.target_loss(model, x, FIRST))
    lam, vec = ls.power_iteration(curv, iters=500, tol=1e-7)
    assert lam == pytest.approx(float(eig[-1]), rel=1e-3)
    assert float(vec.double() @ H @ vec.double()) == pytest.approx(float(eig[-1]), rel=1e-3)
    vals, vecs, _ = ls.lanczos(curv, iters=120)
    assert float(vals[-1]) == pytest.approx(float(eig[-1]), rel=1e-4)
    assert float(vals[0]) == pytest.approx(float(eig[0]), rel=1e-3, abs=1e-5)
    assert eig[0] < 0 < eig[-1]  # a random point of this loss is a saddle: both ends are seen
    top = vecs[-1].double()
    assert float(top @ H @ top) == pytest.approx(float(eig[-1]), rel=1e-3)
    # shifted power iteration reaches the other end too
    low, _ = ls.power_iteration(curv, iters=3000, shift=float(eig[-1]), tol=1e-9)
    assert low == pytest.approx(float(eig[0]), rel=2e-2, abs=1e-4)


def test_ritz_extremes_are_what_fewer_lanczos_steps_find(small):
    """The trace of λmin / λmax by step: the ends of a shorter run with the same start vector,
    moving outward (interlacing), ending at the full run's ends."""
    model, x, H = small
    curv = ls.Curvature(model.parameters(), lambda: ls.target_loss(model, x, FIRST))
    vals, _, T = ls.lanczos(curv, iters=40, seed=3)
    low, high = ls.ritz_extremes(T)
    assert len(low) == len(high) == 40
    assert (low[-1], high[-1]) == pytest.approx((float(vals[0]), float(vals[-1])), rel=1e-12)
    assert all(b <= a + 1e-9 for a, b in zip(low, low[1:]))
    assert all(b >= a - 1e-9 for a, b in zip(high, high[1:]))
    for m in (1, 5, 12):
        short, _, _ = ls.lanczos(curv, iters=m, seed=3)
        assert float(short[0]) == pytest.approx(low[m - 1], rel=1e-6, abs=1e-9)
        assert float(short[-1]) == pytest.approx(high[m - 1], rel=1e-6, abs=1e-9)
    eig = torch.linalg.eigvalsh(H)
    assert low[0] > float(eig[0]) and high[0] < float(eig[-1])  # one step sees neither end


def test_noise_share_along_the_top_direction_matches_the_exact_projection(small):
    model, x, H = small
    evals, evecs = torch.linalg.eigh(H)
    top = evecs[:, -1:].T.float()  # exact top eigenvector
    curv = ls.Curvature(model.parameters(), lambda: ls.target_loss(model, x, FIRST))
    batches = [x[:5], x[5:12], x[12:]]
    got = ls.noise_share(
        curv, top, [(lambda b=b: ls.target_loss(model, b, FIRST)) for b in batches]
    )
    mean = curv.gradient().double()
    noise = [
        curv.gradient(lambda b=b: ls.target_loss(model, b, FIRST)).double() - mean for b in batches
    ]
    want = sum(float((top.double() @ n) ** 2) for n in noise) / sum(float(n @ n) for n in noise)
    assert got["noise_share_top"] == pytest.approx(want, rel=1e-5)
    assert got["random_share"] == pytest.approx(1 / curv.n)


def test_landscape_of_a_run_reports_its_sample_and_geometry(tmp_path):
    run = sl.train(tiny(steps=20, early_stop=False), out=tmp_path / "r")
    df = ls.landscape(
        run, steps=[0, 20], sample=24, power_iters=10, lanczos_iters=10, top_k=2, noise_batches=3
    )
    assert list(df.step) == [0, 20] and (df["sample"] == 24).all() and (df.noise_batch == 16).all()
    assert (df.lambda_max > 0).all() and (df.lambda_min <= df.lambda_max).all()
    assert (df.lambda_max == df[["lambda_max_power", "lambda_max_lanczos"]].max(axis=1)).all()
    assert ((df.noise_share_top >= 0) & (df.noise_share_top <= 1)).all()
    with pytest.raises(sl.SelectorLensError, match="sample size"):
        ls.landscape(run, steps=[0], sample=0)
    with pytest.raises(sl.SelectorLensError, match="no checkpoint"):
        ls.landscape(run, steps=[7])


class Diagonal(ls.Curvature):
    """A 'Hessian' with a known spectrum: H = diag(d), through the Curvature interface."""

    def __init__(self, d):
        self.d, self.n, self.calls = d, len(d), 0

    def hvp(self, v):
        self.calls += 1
        return self.d.to(v.dtype) * v


def test_the_papers_shifted_power_stops_at_once_with_a_wrong_lambda_min_and_lanczos_does_not():
    """The paper code's λmin: power iteration on H - σI, σ = λmax + 1. On a spectrum like the
    plateau's (one large, one negative, the rest near 0), H - σI ≈ -σ I, so consecutive vectors
    are already aligned (|cos| > 0.9999) and its stop fires at its first chance (i = 11, the
    12th product): λmin is then the Rayleigh quotient of a nearly random vector, near the
    spectrum's mean, and the ratio λmax / |λmin| comes out in the hundreds or more."""
    g = torch.Generator().manual_seed(0)
    d = (torch.rand(4000, generator=g) - 0.5) * 0.02  # the bulk, in [-0.01, 0.01]
    d[0], d[1] = 5.0, -1.0
    lam_max, iters_max = ls.paper_power_max(Diagonal(d), seed=0)
    assert lam_max == pytest.approx(5.0, rel=1e-3)
    lam_min, iters, by_iter = ls.shifted_power(Diagonal(d), lam_max, seed=1)
    assert iters == 12 and len(by_iter) == 12
    assert abs(lam_min - float(d.mean())) < 0.01  # a random vector's Rayleigh quotient
    assert lam_max / abs(lam_min) > 100  # the artefact: a ratio in the hundreds or more
    vals, _, _ = ls.lanczos(Diagonal(d), iters=60, seed=1)
    assert float(vals[0]) == pytest.approx(-1.0, abs=1e-3)  # Lanczos finds it
    # run past its stop, the shifted iteration does move toward -1, slowly (ratio 7 / 6 a step)
    late, n, _ = ls.shifted_power(Diagonal(d), lam_max, seed=1, iters=400, stop=False)
    assert n == 400 and late < -0.9
