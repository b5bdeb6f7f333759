"""Logit lens, weight trajectory and representation statistics against hand-computed oracles."""

import math

import pytest
import torch

import selector_lens as sl
from selector_lens.analysis.lens import lens_metrics, logit_lens
from selector_lens.analysis.representations import representation_stats, variance_split
from selector_lens.analysis.trajectory import trajectory, weight_trajectory
from tests.helpers import tiny


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return sl.train(tiny(steps=40), out=tmp_path_factory.mktemp("instr") / "r")


def test_logit_lens_equals_ln_final_and_unembed_by_hand(run):
    table = logit_lens(run, [40])
    model, es = run.model_at(40), run.eval_set()
    pos = run.config.task.first_target_pos
    L = model.cfg.n_layers
    assert table.layer.tolist() == list(range(L + 1))
    _, cache = model.run_with_cache(es.tokens)
    correct, firsts = es.tokens[:, pos + 1], es.candidates[:, :, 0]
    for layer in range(L + 1):
        x = (
            cache[f"blocks.{layer}.hook_resid_pre"]
            if layer < L
            else cache[f"blocks.{L - 1}.hook_resid_post"]
        )
        x = x[:, pos].double()
        ln = (x - x.mean(-1, keepdim=True)) / torch.sqrt(
            x.var(-1, unbiased=False, keepdim=True) + model.cfg.eps
        )
        ln = ln * model.ln_final.w.double() + model.ln_final.b.double()
        logits = ln @ model.W_U.double() + model.b_U.double()
        want = lens_metrics(logits[None], correct, firsts)[0]
        got = table[table.layer == layer].iloc[0]
        for key in ("p_correct", "top1", "entropy", "candidate_loss"):
            assert got[key] == pytest.approx(want[key], abs=1e-5), (layer, key)
    # the last layer is the model's own prediction
    with torch.no_grad():
        own = model(es.tokens)[:, pos]
    assert table.iloc[-1].p_correct == pytest.approx(
        lens_metrics(own[None], correct, firsts)[0]["p_correct"], abs=1e-5
    )


def test_lens_metrics_on_known_logits():
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25, 0.0 + 1e-30]]]))  # one layer, one example
    rows = lens_metrics(logits, torch.tensor([1]), torch.tensor([[0, 1]]))
    r = rows[0]
    assert r["p_correct"] == pytest.approx(0.25) and r["top1"] == 0.0
    assert r["entropy"] == pytest.approx(
        -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25)), abs=1e-9
    )
    assert r["candidate_loss"] == pytest.approx(-math.log(0.25 / 0.75))


def test_weight_trajectory_on_hand_made_states():
    a = {"w": torch.tensor([[3.0, 0.0], [0.0, 4.0]]), "b": torch.tensor([0.0, 0.0])}
    b = {"w": torch.tensor([[3.0, 1.0], [0.0, 4.0]]), "b": torch.tensor([0.0, 0.0])}
    c = {"w": torch.tensor([[3.0, 2.0], [0.0, 4.0]]), "b": torch.tensor([0.0, 1.0])}
    rows = trajectory([(0, a), (1, b), (2, c)])
    assert (
        rows[0]["total_norm"] == 5.0
        and rows[0]["norm.w"] == 5.0
        and math.isnan(rows[0]["displacement"])
    )
    assert (
        rows[1]["displacement"] == 1.0
        and rows[1]["disp.w"] == 1.0
        and math.isnan(rows[1]["cosine"])
    )
    assert rows[2]["displacement"] == pytest.approx(math.sqrt(2))
    assert rows[2]["cosine"] == pytest.approx(1 / math.sqrt(2))  # (0,1,0,0,0,0) . (0,1,0,0,0,1)
    assert rows[2]["total_norm"] == pytest.approx(math.sqrt(9 + 4 + 16 + 1))
    assert "norm.b" not in rows[0]  # per-component columns: weight matrices only


def test_weight_trajectory_of_a_run_reads_every_checkpoint(run):
    table = weight_trajectory(run)
    assert table.step.tolist() == run.steps
    model = run.model_at(run.steps[-1])
    total = math.sqrt(sum(float(p.double().pow(2).sum()) for p in model.parameters()))
    assert table.total_norm.iloc[-1] == pytest.approx(total, rel=1e-9)
    assert (table.displacement.iloc[1:] > 0).all()


def test_weight_trajectory_is_kept_and_served_to_a_published_copy(run, tmp_path):
    from selector_lens.paper.publish import publish_run

    table = weight_trajectory(run)
    publish_run(run, tmp_path / "pub")
    published = sl.Run.open(tmp_path / "pub")
    assert not published.has_weights
    served = weight_trajectory(published)  # from the store: no checkpoint to read
    assert served.total_norm.tolist() == table.total_norm.tolist()
    with pytest.raises(sl.SelectorLensError, match="weights are not included"):
        weight_trajectory(published, run.steps[:2])  # other steps: not stored, not computable


def test_cli_logit_lens_and_weights_json(run):
    import json

    from tests.helpers import cli

    out = cli("logit-lens", "--run", str(run.path), "--step", "40", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["layer"] for r in rows] == list(range(run.config.model.n_layers + 1))
    assert set(rows[0]) == {"step", "layer", "p_correct", "top1", "entropy", "candidate_loss"}
    out = cli("weights", "--run", str(run.path), "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["step"] for r in rows] == run.steps and {
        "total_norm",
        "displacement",
        "cosine",
    } <= set(rows[0])
    bad = cli("logit-lens", "--run", str(run.path), "--step", "41")
    assert bad.returncode == 2 and "no checkpoint at step 41" in bad.stderr


def test_instrument_figures_plot_their_tables(run):
    from selector_lens.viz import logit_lens_curves, weight_trajectory_curves

    lens = logit_lens(run, [20, 40])
    fig = logit_lens_curves(lens, run.tau())
    assert len(fig.data) == run.config.model.n_layers + 1
    assert list(fig.data[-1].y) == lens[lens.layer == run.config.model.n_layers].p_correct.tolist()
    traj = weight_trajectory(run)
    fig = weight_trajectory_curves(traj)
    assert [list(d.y) for d in fig.data][0] == traj.total_norm.tolist() and len(fig.data) == 3


def test_variance_split_on_planted_representations():
    """Base g sits at (±3, 0), its examples at ±0.5 along the other axis: within-base variance
    0.25, between-base 9, exactly."""
    x = torch.tensor([[[3.0, 0.5], [3.0, -0.5]], [[-3.0, 0.5], [-3.0, -0.5]]])
    assert variance_split(x) == pytest.approx((0.25, 9.0))
    shifted = x + torch.tensor([10.0, -7.0])  # a common offset changes neither part
    assert variance_split(shifted) == pytest.approx((0.25, 9.0))
    one = x[:, :1].expand(2, 2, 2)  # every example on its base's mean: collapsed
    assert variance_split(one) == pytest.approx((0.0, 9.0))


def test_representation_stats_by_hand(run):
    """Per layer at the a1-predicting position, from the cache by hand: within = mean squared
    distance to the base's mean, between = of the base means to the grand mean."""
    table = representation_stats(run, [0, 40])
    model, es = run.model_at(40), run.eval_set()
    pos, k, L = run.config.task.first_target_pos, run.config.task.k, model.cfg.n_layers
    _, cache = model.run_with_cache(es.tokens)
    got = table[table.step == 40].set_index("layer")
    assert list(got.index) == list(range(L + 1)) and len(table) == 2 * (L + 1)
    for layer in range(L + 1):
        name = f"blocks.{layer}.hook_resid_pre" if layer < L else f"blocks.{L - 1}.hook_resid_post"
        x = cache[name][:, pos].double().numpy().reshape(-1, k, model.cfg.d_model)
        means = x.mean(1)
        within = ((x - means[:, None]) ** 2).sum(-1).mean()
        between = ((means - x.reshape(-1, x.shape[-1]).mean(0)) ** 2).sum(-1).mean()
        assert got.loc[layer, "within"] == pytest.approx(within, rel=1e-5)
        assert got.loc[layer, "between"] == pytest.approx(between, rel=1e-5)
        if layer == 0:  # the embedding of the same token (SEP) at the same position everywhere
            assert within == between == 0 and math.isnan(got.loc[0, "ratio"])
        else:
            assert got.loc[layer, "ratio"] == pytest.approx(within / between, rel=1e-5)


def test_an_onset_needs_the_rise_to_hold():
    import numpy as np

    from selector_lens.analysis.routing import onset

    steps = list(range(0, 1000, 50))
    rng = np.random.default_rng(0)
    noise = 0.05 + 0.04 * rng.standard_normal(len(steps))  # around 0.05, single evals above 0.1
    assert (noise >= 0.1).any() and onset(steps, noise, 0.1) is None  # noise alone: no onset
    rise = noise.copy()
    rise[12:] += 0.5  # a rise that holds from step 600
    assert onset(steps, rise, 0.1) == 600
    spike = noise.copy()
    spike[3] = 0.9  # one eval at step 150: not an onset
    assert onset(steps, spike, 0.1) is None
    assert onset([0, 50], [0.0, 0.2], 0.1) == 50  # at the log's end, what is left counts
