"""The fast path (fused.forward, train_step, train_many) against the HookedTransformer itself."""

import os
import subprocess
import sys

import pytest
import torch

import selector_lens as sl
from selector_lens.model import fused
from selector_lens.training.trainer import train_many, train_step
from tests.helpers import tiny

TASK = sl.SelectorTask(k=5, n_bases=20)


def trained_like(cfg: sl.ModelConfig, seed: int):
    """A model whose weights are off their initialisation (biases and LN gains too)."""
    model = sl.build_model(cfg, TASK, seed)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return model


@pytest.mark.parametrize(
    "act_fn,norm,attn_only",
    [
        ("gelu", "LN", False),
        ("gelu_new", "LN", False),
        ("relu", None, False),
        ("silu", "LN", False),
        ("gelu", "LN", True),  # attention only: no MLP, no LN2 (the induction-head models)
        ("gelu", None, True),
    ],
)
def test_fused_forward_equals_hooked_transformer(act_fn, norm, attn_only):
    cfg = sl.ModelConfig(n_layers=2, act_fn=act_fn, normalization_type=norm, attn_only=attn_only)
    model = trained_like(cfg, 1)
    assert model.cfg.attn_only == attn_only and hasattr(model.blocks[0], "mlp") != attn_only
    x = TASK.generate().tokens
    assert fused.supports(model)
    torch.testing.assert_close(fused.forward(model, x), model(x), atol=1e-5, rtol=1e-5)
    first = TASK.first_target_pos  # and the training path's trimmed last block
    got = fused.forward(model, x, positions=slice(first, -1))
    torch.testing.assert_close(got, model(x)[:, first:-1], atol=1e-5, rtol=1e-5)


def test_the_last_block_at_the_unembedded_positions_alone_gives_the_same_logits():
    """Training unembeds the target positions only, and runs the last block there alone (its
    keys and values still from every position): the logits are TransformerLens's there."""
    models = [trained_like(sl.ModelConfig(n_layers=3), seed) for seed in (5, 6)]
    x = TASK.generate().tokens[:24]
    first = TASK.first_target_pos
    for where in (slice(first, -1), slice(0, 1), slice(3, 9)):
        got = fused.forward(models[0], x, positions=where)
        torch.testing.assert_close(got, models[0](x)[:, where], atol=1e-5, rtol=1e-5)
    both = fused.forward(models, torch.stack([x, x.flip(0)]), positions=slice(first, -1))
    torch.testing.assert_close(both[1], models[1](x.flip(0))[:, first:-1], atol=1e-5, rtol=1e-5)


def test_cached_passes_and_shared_past_equal_the_full_forward():
    model = trained_like(sl.ModelConfig(n_layers=2), 2)
    x = TASK.generate().tokens[:12]
    full = model(x)
    _, kv = fused.forward(model, x[:, :8], keep_kv=True)
    mid, kv2 = fused.forward(model, x[:, 8:11], past=kv, keep_kv=True)
    torch.testing.assert_close(mid, full[:, 8:11], atol=1e-5, rtol=1e-5)
    # rows 0..3 each serve 3 continuation rows: the same prefix, three different targets
    prefix = [
        (torch.cat([a, b], 2)[:4], torch.cat([c, d], 2)[:4]) for (a, c), (b, d) in zip(kv, kv2)
    ]
    targets = x[:12, 11:]  # 12 continuations, 3 per prefix row
    got = fused.forward(model, targets, past=prefix, past_repeat=3)
    oracle = model(torch.cat([x[:4, :11].repeat_interleave(3, 0), targets], 1))[:, 11:]
    torch.testing.assert_close(got, oracle, atol=1e-5, rtol=1e-5)


def test_start_and_stop_at_a_layer_equal_transformer_lens():
    """The residual stream entering layer 2 (or leaving the last) equals TransformerLens's
    `stop_at_layer`, and running on from it (with a past split the same way) gives the full
    forward's logits."""
    model = trained_like(sl.ModelConfig(n_layers=3), 3)
    x = TASK.generate().tokens[:6]
    resid, kv = fused.forward(model, x[:, :8], stop_at_layer=2, keep_kv=True)
    torch.testing.assert_close(resid, model(x[:, :8], stop_at_layer=2), atol=1e-5, rtol=1e-5)
    assert len(kv) == 2
    _, kv_top = fused.forward(model, resid, start_at_layer=2, keep_kv=True)
    assert len(kv_top) == 1
    rest = fused.forward(model, x[:, 8:], past=kv, stop_at_layer=2)
    got = fused.forward(model, rest, past=kv_top, start_at_layer=2)
    torch.testing.assert_close(got, model(x)[:, 8:], atol=1e-5, rtol=1e-5)
    top = fused.forward(model, x, stop_at_layer=3)  # the last block's residual stream, no logits
    torch.testing.assert_close(top, model(x, stop_at_layer=3), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="out of"):
        fused.forward(model, x, stop_at_layer=4)


def test_hooks_see_and_change_what_transformer_lens_hooks_do():
    model = trained_like(sl.ModelConfig(n_layers=2), 3)
    x = TASK.generate().tokens[:6]
    seen = {}

    def zero_head(z, hook):
        z[:, :, 1] = 0.0
        return z

    def keep(pattern, hook):
        seen[hook.name] = pattern.clone()

    hooks = [("blocks.1.attn.hook_z", zero_head), ("blocks.0.attn.hook_pattern", keep)]
    got = fused.forward(model, x, fwd_hooks=hooks)
    want = model.run_with_hooks(x, fwd_hooks=[("blocks.1.attn.hook_z", zero_head)])
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)

    def zero_in_place(z, hook):  # edits in place and returns None: TransformerLens keeps the edit
        z[:, :, 1] = 0.0

    torch.testing.assert_close(
        fused.forward(model, x, fwd_hooks=[("blocks.1.attn.hook_z", zero_in_place)]),
        want,
        atol=1e-5,
        rtol=1e-5,
    )
    _, cache = model.run_with_cache(x)
    torch.testing.assert_close(
        seen["blocks.0.attn.hook_pattern"],
        cache["blocks.0.attn.hook_pattern"],
        atol=1e-6,
        rtol=1e-5,
    )


def test_a_pattern_over_fewer_keys_than_the_softmax_width_is_transformer_lenses():
    """Explicit attention pads a key axis shorter than 16 for PyTorch's vector softmax: a hook
    still sees TransformerLens's pattern over the real keys, and its edit still takes effect."""
    model = trained_like(sl.ModelConfig(n_layers=2), 4)
    x = TASK.generate().tokens[:6]
    _, kv = fused.forward(model, x[:, :8], keep_kv=True)
    assert 8 + 3 < fused.SOFTMAX_WIDTH
    seen = {}

    def keep(pattern, hook):
        seen[hook.name] = pattern.view(-1).view(pattern.shape).clone()  # as contiguous as TL's

    def ignore_first_key(pattern, hook):
        pattern[..., 0] = 0.0

    hooks = [("blocks.0.attn.hook_pattern", keep), ("blocks.1.attn.hook_pattern", ignore_first_key)]
    got = fused.forward(model, x[:, 8:11], past=kv, fwd_hooks=hooks)
    _, cache = model.run_with_cache(x)
    want = cache["blocks.0.attn.hook_pattern"][:, :, 8:11, :11]
    assert seen["blocks.0.attn.hook_pattern"].shape == want.shape
    torch.testing.assert_close(seen["blocks.0.attn.hook_pattern"], want, atol=1e-6, rtol=1e-5)
    oracle = model.run_with_hooks(x, fwd_hooks=[("blocks.1.attn.hook_pattern", ignore_first_key)])
    torch.testing.assert_close(got, oracle[:, 8:11], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(got, model(x)[:, 8:11], atol=1e-3)  # the edit mattered


def test_attached_hooks_and_unknown_hook_points_are_refused():
    model = sl.build_model(sl.ModelConfig(n_layers=1), TASK)
    x = TASK.generate().tokens[:2]
    with pytest.raises(ValueError, match="hook_resid_mid"):
        fused.forward(model, x, fwd_hooks=[("blocks.0.hook_resid_mid", lambda t, hook: t)])
    with model.hooks(fwd_hooks=[("blocks.0.hook_resid_pre", lambda t, hook: t)]):
        with pytest.raises(sl.SelectorLensError, match="hooks attached"):
            fused.forward(model, x)


def test_model_config_refuses_what_the_fused_path_cannot_run():
    with pytest.raises(sl.SelectorLensError, match="act_fn"):
        sl.ModelConfig(act_fn="solu_ln")
    with pytest.raises(sl.SelectorLensError, match="normalization_type"):
        sl.ModelConfig(normalization_type="RMS")


def test_train_step_gradients_equal_the_hooked_transformer_loss_gradients():
    model = trained_like(sl.ModelConfig(n_layers=2), 4)
    x = TASK.generate().tokens[:16]
    first = TASK.first_target_pos
    logits = model(x)[:, first:-1]
    loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), x[:, first + 1 :].reshape(-1)
    )
    want = torch.autograd.grad(loss, list(model.parameters()))
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: keep the weights, look at the grads
    got_loss = train_step([model], [opt], x[None], first, grad_clip=0.0)
    assert got_loss.item() == pytest.approx(loss.item(), abs=1e-6)
    for (name, p), g in zip(model.named_parameters(), want):
        torch.testing.assert_close(p.grad, g, atol=1e-6, rtol=1e-4, msg=name)


def test_batched_models_train_like_separate_runs(tmp_path):
    cfgs = [tiny(seed=s, steps=30, lr=l) for s, l in ((1, 3e-3), (2, 1e-3))]
    together = train_many(cfgs, [tmp_path / "a", tmp_path / "b"])
    apart = [sl.train(c, out=tmp_path / f"solo{i}") for i, c in enumerate(cfgs)]
    for t, a in zip(together, apart):
        rt, ra = t.metric_rows(), a.metric_rows()
        assert [r["step"] for r in rt] == [r["step"] for r in ra]
        for x, y in zip(rt, ra):
            assert x["loss"] == pytest.approx(y["loss"], abs=1e-4)
            assert x["candidate_loss"] == pytest.approx(y["candidate_loss"], abs=1e-4)
        wt, wa = t.model_at(30).state_dict(), a.model_at(30).state_dict()
        for k in wt:
            if k.endswith(
                "b_K"
            ):  # softmax ignores a key bias: its gradient is rounding noise, which Adam scales up
                continue
            torch.testing.assert_close(wt[k], wa[k], atol=1e-4, rtol=1e-3, msg=k)


def test_batched_runs_must_share_a_shape(tmp_path):
    with pytest.raises(sl.SelectorLensError, match="same model"):
        train_many([tiny(), tiny(model={"d_mlp": 32})], [tmp_path / "a", tmp_path / "b"])


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's malloc")
def test_malloc_is_tuned_only_when_the_user_opts_in():
    code = "from selector_lens.model import fused; print(fused.keep_freed_memory())"

    def tuned(**env):
        base = {k: v for k, v in os.environ.items() if k != fused.KEEP_FREED_MEMORY}
        out = subprocess.run(
            [sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True
        )
        return out.stdout.strip()

    assert tuned() == "False"
    assert tuned(SELECTOR_LENS_KEEP_FREED_MEMORY="1") == "True"
    assert tuned(SELECTOR_LENS_KEEP_FREED_MEMORY="1", MALLOC_ARENA_MAX="2") == "False"


COMPILED = """
import torch, selector_lens as sl
from tests.unit.model.test_fused import TASK, trained_like
from selector_lens.training.trainer import compiled_losses, train_step
pair = [trained_like(sl.ModelConfig(n_layers=2), 8) for _ in range(2)]
x = TASK.generate().tokens[:16][None]
got = []
for model, losses_of in zip(pair, (None, compiled_losses())):
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    loss = train_step([model], [opt], x, TASK.first_target_pos, 0.0, losses_of=losses_of)
    got.append((loss, [p.grad for p in model.parameters()]))
torch.testing.assert_close(got[1][0], got[0][0], atol=1e-6, rtol=1e-5)
for a, b in zip(got[1][1], got[0][1]):
    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)
print("same")
"""


def test_the_compiled_step_gives_the_eager_losses_and_gradients():
    """`compile=True` (torch.compile of the forward and loss): the same step to float rounding.
    In a fresh interpreter: dynamo does not trace through the suite's runtime type checks."""
    out = subprocess.run([sys.executable, "-c", COMPILED], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "same", out.stderr[-2000:]
