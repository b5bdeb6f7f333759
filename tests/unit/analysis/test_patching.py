import pytest
import torch
from transformer_lens import patching as tlp

import selector_lens as sl
from selector_lens.analysis.patching import SITES


@pytest.fixture(scope="module")
def setup():
    task = sl.SelectorTask(k=4, n_bases=6)
    data = task.generate()
    model = sl.build_model(
        sl.ModelConfig(n_layers=2, n_heads=2, d_model=32, d_head=16, d_mlp=64), task, seed=2
    )
    corr = sl.z_corruption(data, examples=range(0, 24, 2))
    return model, corr, sl.normalized_logit_diff(model, corr)


@pytest.mark.parametrize(
    "site,tl_fn",
    [
        ("resid_pre", tlp.get_act_patch_resid_pre),
        ("resid_mid", tlp.get_act_patch_resid_mid),
        ("attn_out", tlp.get_act_patch_attn_out),
        ("mlp_out", tlp.get_act_patch_mlp_out),
        ("z", tlp.get_act_patch_attn_head_out_by_pos),
    ],
)
def test_patch_equals_transformer_lens_patching(setup, site, tl_fn):
    model, corr, metric = setup
    _, clean_cache = model.run_with_cache(corr.clean)
    want = tl_fn(model, corr.corrupt, clean_cache, metric)
    got = sl.patch(model, corr.clean, corr.corrupt, site, metric, patches_per_pass=5)
    assert got.shape == want.shape
    # resid_pre and z run through fused.forward (logits equal to 1e-5), and the metric divides
    # by the clean - corrupt logit gap: a float32 reordering shows up to ~1.2e-5 here
    assert torch.allclose(got, want.float(), atol=3e-5)


def test_resid_post_equals_the_generic_tl_patch(setup):
    model, corr, metric = setup
    _, clean_cache = model.run_with_cache(corr.clean)
    want = tlp.generic_activation_patch(
        model,
        corr.corrupt,
        clean_cache,
        metric,
        tlp.layer_pos_patch_setter,
        "resid_post",
        index_axis_names=("layer", "pos"),
    )
    assert torch.allclose(
        sl.patch(model, corr.clean, corr.corrupt, "resid_post", metric), want.float(), atol=1e-5
    )


def test_invariants(setup):
    model, corr, metric = setup
    # the metric's ends come from fused.forward, equal to the HookedTransformer to float32 noise
    assert metric(model(corr.clean)).item() == pytest.approx(1.0, abs=1e-5)
    assert metric(model(corr.corrupt)).item() == pytest.approx(0.0, abs=1e-5)

    # clean into clean changes nothing, at every site
    def raw(logits):
        return sl.logit_diff(logits, corr)

    base = raw(model(corr.clean)).item()
    for site in SITES:
        out = sl.patch(model, corr.clean, corr.clean, site, raw)
        assert torch.allclose(out, torch.full_like(out, base), atol=1e-5), site
    # patching layer 0's resid_pre at every position at once restores the clean run
    at_once = sl.patch(model, corr.clean, corr.corrupt, "resid_pre", metric, positions="all")
    assert at_once.shape == (2,) and at_once[0].item() == pytest.approx(1.0, abs=1e-5)
    # one position at a time: only the z positions differ between clean and corrupt
    each = sl.patch(model, corr.clean, corr.corrupt, "resid_pre", metric)
    others = [p for p in range(16) if p not in corr.z_positions]
    assert (
        each[0, others].abs().max().item() < 1e-5 and each[0, corr.z_positions].abs().min() > 1e-3
    )


def test_all_positions_at_once_equals_tl_all_pos(setup):
    model, corr, metric = setup
    _, clean_cache = model.run_with_cache(corr.clean)
    want = tlp.get_act_patch_attn_head_out_all_pos(model, corr.corrupt, clean_cache, metric)
    got = sl.patch(model, corr.clean, corr.corrupt, "z", metric, positions="all")
    assert got.shape == want.shape and torch.allclose(got, want.float(), atol=1e-5)


def test_corruption_changes_only_z_and_the_target(setup):
    _, corr, _ = setup
    diff = (corr.clean != corr.corrupt).any(0).nonzero().flatten().tolist()
    assert diff == corr.z_positions  # tokens differ only at z (the A tokens stay the clean ones)
    assert (corr.clean_target != corr.corrupt_target).all()
    with pytest.raises(sl.SelectorLensError, match="needs a bz_to_a task"):
        sl.z_corruption(sl.SelectorTask(k=3, n_bases=2, direction="b_to_a").generate())


def test_bad_site_position_head(setup):
    model, corr, metric = setup
    with pytest.raises(sl.SelectorLensError, match="unknown site"):
        sl.patch(model, corr.clean, corr.corrupt, "resid_side", metric)
    with pytest.raises(sl.SelectorLensError, match="positions must lie in 0..15"):
        sl.patch(model, corr.clean, corr.corrupt, "resid_pre", metric, positions=[16])
    with pytest.raises(sl.SelectorLensError, match="head out of range"):
        sl.patch(model, corr.clean, corr.corrupt, "z", metric, heads=[2])


@pytest.mark.parametrize("site", ["resid_pre", "z"])
def test_patch_series_skips_only_positions_that_cannot_matter(tmp_path, site):
    """patch_series patches only z .. the a1-predicting position; every other position, which it
    writes as 0 without a forward pass, equals 0 when patched for real."""
    import numpy as np

    from selector_lens.analysis.patching import normalized_logit_diff, patch, z_corruption
    from tests.helpers import tiny

    run = sl.train(tiny(steps=60, early_stop=False), out=tmp_path / "r")
    table = sl.patch_series(run, site, [60], n_examples=12)
    data = run.task_data
    examples = np.sort(np.random.default_rng(0).choice(len(data.tokens), 12, replace=False))
    corr = z_corruption(data, examples)
    model = run.model_at(60)
    full = patch(model, corr.clean, corr.corrupt, site, normalized_logit_diff(model, corr))
    keys = ["layer", "pos", "head"] if site == "z" else ["layer", "pos"]
    got = table.sort_values(keys).value.to_numpy().reshape(full.shape)
    assert np.allclose(got, full.numpy(), atol=1e-5)
    live = range(min(corr.z_positions), corr.pos + 1)
    dead = [p for p in range(full.shape[1]) if p not in live]
    assert np.abs(full[:, dead].numpy()).max() < 1e-5 and np.abs(got[:, list(live)]).max() > 0.01
