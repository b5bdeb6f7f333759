"""Attribution patching against exact activation patching: equal where the metric is linear in
the patched activation, close where the effects are small, on the selector and another task."""

import json

import pytest
import torch

import selector_lens as sl
from selector_lens.analysis.attribution import attribute, compare
from selector_lens.analysis.patching import normalized_logit_diff, patch, z_corruption
from selector_lens.task.induction import InductionTask
from tests.helpers import cli

TRAIN = dict(steps=30, eval_every=10, ckpt_every=10, early_stop=False, lr=3e-3)


@pytest.fixture(scope="module")
def linear_run(tmp_path_factory):
    """Attention only, no LayerNorm: the logits are linear in the last block's head outputs."""
    model = sl.ModelConfig(n_layers=2, n_heads=2, d_model=16, d_head=8, d_mlp=32,
                           attn_only=True, normalization_type=None)  # fmt: skip
    cfg = sl.TrainConfig(task=sl.SelectorTask(k=3, n_bases=8), model=model, batch_size=16, **TRAIN)
    return sl.train(cfg, out=tmp_path_factory.mktemp("linear") / "run")


@pytest.fixture(scope="module")
def induction_run(tmp_path_factory):
    model = sl.ModelConfig(n_layers=2, n_heads=2, d_model=16, d_head=8, d_mlp=32, attn_only=True)
    task = InductionTask(vocab=8, length=12, segment=3, n_sequences=300)
    cfg = sl.TrainConfig(task=task, model=model, batch_size=32, **TRAIN)
    return sl.train(cfg, out=tmp_path_factory.mktemp("induction") / "run")


def test_the_estimate_is_exact_where_the_metric_is_linear(linear_run):
    model = linear_run.model_at(30)
    corr = z_corruption(linear_run.task_data)
    upto = corr.pos + 1
    clean, corrupt = corr.clean[:, :upto], corr.corrupt[:, :upto]
    metric = normalized_logit_diff(model, corr)
    estimate = attribute(model, clean, corrupt, metric)  # [layer, pos, head]
    exact = patch(model, clean, corrupt, "z", metric)
    assert estimate.shape == exact.shape == (2, upto, 2)
    assert estimate[1] == pytest.approx(exact[1], abs=1e-4)  # the last block: exact
    assert exact[0].abs().max() > 1e-3  # the first block's patching does move the metric


def test_the_estimate_tracks_exact_patching_on_every_checkpoint(linear_run, induction_run):
    for run in (linear_run, induction_run):
        result = compare(run, n_examples=64)
        assert [x["step"] for x in result["per_step"]] == run.steps
        assert all(x["correlation"] >= 0.9 for x in result["per_step"])  # small effects
        assert result["seconds_exact"] > 0 and result["seconds_attribution"] > 0


def test_the_estimate_sums_a_heads_positions_where_exact_patching_does(induction_run):
    result = compare(induction_run, [30], n_examples=64)
    table = result["table"]
    assert len(table) == 4 and set(table.pos) == {-1}  # one number per head
    est = sl.attribution_patch(induction_run, "z", [30], n_examples=64)
    per_head = est.groupby(["layer", "head"]).estimate.sum()
    assert list(table.sort_values(["layer", "head"]).estimate) == pytest.approx(list(per_head))


def test_the_attribute_command_reads_any_task(induction_run):
    r = cli("attribute", "--run", induction_run.path, "--step", "30", "--examples", "32", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["pairs"] == 4 and len(out["heads"]) == 4
    assert {"value", "estimate", "layer", "head"} <= set(out["heads"][0])
    text = cli("attribute", "--run", induction_run.path, "--step", "30", "--examples", "32")
    assert "attribution patching (z) against exact patching" in text.stdout
    # what the command stored, the task's dashboard draws (with the task's loss beside it)
    page = sl.run_dashboard(induction_run, induction_run.path / "d.html", ablation=False)
    assert "attribution patching: each head" in page.read_text()


def test_an_unknown_site_is_one_line(induction_run):
    model = induction_run.model_at(30)
    tokens = induction_run.task_data.tokens[:2]
    with pytest.raises(sl.SelectorLensError, match="unknown site"):
        attribute(model, tokens, tokens, lambda logits: logits.sum(), site="mlp_out")
    assert torch.is_tensor(attribute(model, tokens, tokens, lambda x: x.sum(), "resid_pre"))


def test_the_estimate_is_transformer_lens_own_attribution_patching(tmp_path):
    """TransformerLens 3.9's node attribution (per example, averaged) on a model with MLPs: the
    same numbers as one batched pass, for a metric that is a mean over examples."""
    from transformer_lens.tools.analysis.attribution_patching import attribution_patch

    cfg = sl.TrainConfig(task=sl.SelectorTask(k=3, n_bases=8), batch_size=16, **TRAIN,
                         model=sl.ModelConfig(n_layers=2, n_heads=2, d_model=16, d_head=8,
                                              d_mlp=32))  # fmt: skip
    run = sl.train(cfg, out=tmp_path / "run")
    model = run.model_at(30)
    corr = z_corruption(run.task_data)
    clean, corrupt = corr.clean[:6], corr.corrupt[:6]
    a, b = int(corr.clean_target[0]), int(corr.corrupt_target[0])
    assert a != b

    def metric(logits):  # the same function of every example's logits: a mean over them
        return (logits[:, corr.pos, a] - logits[:, corr.pos, b]).mean()

    ours = attribute(model, clean, corrupt, metric)  # [layer, pos, head]
    theirs = attribution_patch(model, clean, corrupt, metric).node_scores
    heads = {
        (n.layer, n.position, n.head): v for n, v in theirs.items() if n.kind == "attn_head_out"
    }
    assert len(heads) == ours.numel() and ours.abs().max() > 1e-3
    for (layer, pos, head), v in heads.items():
        assert ours[layer, pos, head].item() == pytest.approx(v, abs=1e-5)
