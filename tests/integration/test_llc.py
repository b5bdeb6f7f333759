"""The LLC estimator against models whose learning coefficient is known, at the default settings,
and on a run: the task's own loss, stored per checkpoint, one line without devinterp."""

import json
import math

import pytest
import torch

import selector_lens as sl
from tests.helpers import cli

pytest.importorskip("devinterp")
from selector_lens.analysis.llc import LLCSettings, estimate, llc, task_loss_fn  # noqa: E402

N = 1000
ROWS = torch.arange(N)[:, None].expand(N, 2)  # devinterp samples rows; each names one example


class Weights(torch.nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(d))


def regression(d: int):
    """A full-rank linear regression at its least-squares point: lambda = d / 2."""
    g = torch.Generator().manual_seed(d)
    x = torch.randn(N, d, generator=g)
    y = x @ torch.randn(d, generator=g) + torch.randn(N, generator=g)
    model = Weights(d)
    with torch.no_grad():
        model.w.copy_(torch.linalg.lstsq(x, y[:, None]).solution[:, 0])

    def loss(m, ids):  # the Gaussian negative log-likelihood, per example: [batch, 1]
        i = ids[:, 0]
        return 0.5 * (y[i] - x[i] @ m.w)[:, None] ** 2

    return model, loss, d / 2


def singular(ks: list[int]):
    """The loss sum_i w_i^(2 k_i) at 0: lambda = sum_i 1 / (2 k_i) (devinterp's own check)."""
    model, k = Weights(len(ks)), torch.tensor(ks)

    def loss(m, ids):
        return (m.w ** (2 * k)).sum().expand(len(ids), 1)

    return model, loss, sum(1 / (2 * k) for k in ks)


@pytest.mark.parametrize(
    "make, arg",
    [(regression, 2), (regression, 6), (singular, [1, 2, 2]), (singular, [1, 1, 2, 3])],
)
def test_the_default_estimate_lands_within_15_percent(make, arg):
    model, loss, true = make(arg)
    out = estimate(model, ROWS, loss, N)
    assert out["n_beta"] == pytest.approx(N / math.log(N))
    assert abs(out["llc"] / true - 1) < 0.15, (out["llc"], true)
    assert len(out["llc_per_chain"]) == LLCSettings().chains and out["llc_std"] > 0


def test_a_hotter_sampler_is_caught():
    """The same regression at ~40 x the default step: the estimate leaves the band (the test can
    fail)."""
    model, loss, true = regression(2)
    out = estimate(model, ROWS, loss, N, LLCSettings(lr=3e-2))
    assert abs(out["llc"] / true - 1) > 0.15 or out["flags"]


def test_the_task_loss_is_the_trainers(tmp_path):
    from selector_lens.training.trainer import target_losses
    from tests.helpers import tiny

    run = sl.train(tiny(steps=20, ckpt_every=10), out=tmp_path / "r")
    model, tokens = run.model_at(20), run.task_data.tokens[:32]
    per_token = task_loss_fn(run.config.task)(model, tokens)
    want = target_losses([model], tokens[None], run.config.task.loss_start)[0]
    assert per_token.mean().item() == pytest.approx(want.item(), abs=1e-5)
    settings = LLCSettings(chains=2, draws=20, burn_in=5, batch_size=16)
    table = llc(run, [10, 20], settings)
    assert list(table.step) == [10, 20] and table.llc.notna().all()
    again = llc(run, [10, 20], settings)  # from the store
    assert list(again.llc) == list(table.llc)
    out = cli("llc", "--run", run.path, "--step", "20", "--chains", "2", "--draws", "20",
              "--burn-in", "5", "--batch-size", "16", "--json")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)[0]["llc"] == table.llc.iloc[1]


def test_without_devinterp_it_is_one_line(monkeypatch):
    import builtins

    real = builtins.__import__

    def refuse(name, *args, **kwargs):
        if name.startswith("devinterp"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refuse)
    with pytest.raises(sl.SelectorLensError, match=r"pip install 'selector-lens\[slt\]'"):
        estimate(Weights(1), ROWS, lambda m, ids: m.w.sum().expand(len(ids), 1), N)


def test_the_dashboard_shows_the_stages(tmp_path):
    """The stages panel draws what the store keeps: the LLC with its chains' spread as a band,
    each head's attribution summed over positions per checkpoint, one slider marking the same
    step on both rows (and τ kept on each); one of the two stored: a note naming the command
    that adds the other."""
    from selector_lens.analysis.attribution import attribution_series
    from selector_lens.analysis.tables import gather
    from selector_lens.viz.stages import stages_panel
    from tests.helpers import tiny

    run = sl.train(tiny(steps=20, ckpt_every=10), out=tmp_path / "r")
    t = gather(run, ablation=False, patch_steps=0, explorer_steps=0, lens_steps=0)
    assert t.llc is None and t.attribution is None and not any("llc" in n for n in t.notes)
    attribution = attribution_series(run, "z", [0, 10, 20], n_examples=8)
    t = gather(run, ablation=False, patch_steps=0, explorer_steps=0, lens_steps=0)
    assert t.llc is None and any("selector-lens llc --every 4" in n for n in t.notes)
    table = llc(run, [10, 20], LLCSettings(chains=2, draws=10, burn_in=2, batch_size=16))
    t = gather(run, ablation=False, patch_steps=0, explorer_steps=0, lens_steps=0)
    assert list(t.llc.llc) == list(table.llc) and len(t.attribution) == len(attribution)

    fig = stages_panel(t.metrics, "loss", "loss", t.llc, t.attribution, tau=15)
    hi, lo, mean = fig.data[1], fig.data[2], fig.data[3]
    assert list(mean.y) == list(table.llc)
    assert list(hi.y - lo.y) == pytest.approx(list(2 * table.llc_std))
    heat = fig.data[4]
    want = attribution.query("step == 20 and layer == 1 and head == 0").estimate.sum()
    assert heat.y[run.config.model.n_heads] == "L1H0"
    assert heat.z[run.config.model.n_heads][list(heat.x).index(20)] == pytest.approx(want)
    (slider,) = fig.layout.sliders
    assert [s.label for s in slider.steps] == ["0", "10", "20"]
    shapes = slider.steps[1].args[0]["shapes"]
    assert sorted((s["x0"], s["xref"]) for s in shapes) == [
        (10, "x"),
        (10, "x2"),
        (15, "x"),
        (15, "x2"),
    ]
    page = sl.run_dashboard(run, tmp_path / "d.html").read_text()
    assert "Stages: the LLC beside the loss" in page
