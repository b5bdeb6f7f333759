"""Noise-scaled branches (`branch --noise-scale C`): C = 1 is the ordinary step bit for bit,
C = 0 and C = 2 match a hand-written full-batch loop, a killed branch resumes exactly, and the
records (clipping, the update and its component down ḡ) against hand-computed values."""

import pytest
import torch

import selector_lens as sl
from selector_lens.model.adapter import tensors_checksum
from selector_lens.task.order import BatchOrder
from selector_lens.training import branch as branching
from selector_lens.training.branch import Changes, make_branch
from selector_lens.training.noise import REFRESH_EVERY, NoiseScale
from selector_lens.training.trainer import make_optimizer, read_state, train_many
from tests.helpers import cli, logged, tiny


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
    """K = 3, 12 bases (36 examples: a reference batch of 16 x 16 holds them all, so ḡ is the
    exact full-batch gradient); a training state every 10 steps."""
    out = tmp_path_factory.mktemp("parent") / "p"
    cfg = tiny(steps=60, ckpt_every=10, state_every=10, early_stop=False)
    return sl.train(cfg, out=out)


def without_noise_keys(rows):
    return [{k: v for k, v in r.items() if not k.startswith("noise_")} for r in rows]


def test_scale_one_is_the_ordinary_step_bit_for_bit(parent, tmp_path):
    same = sl.branch(parent, 20, tmp_path / "same")
    one = sl.branch(parent, 20, tmp_path / "one", noise_scale=1.0)
    assert without_noise_keys(logged(one)) == logged(same)
    for step in (30, 40, 50, 60):
        a, b = one.model_at(step).state_dict(), same.model_at(step).state_dict()
        assert tensors_checksum(dict(a)) == tensors_checksum(dict(b))
    assert one.info["branch"]["noise_scale"] == 1.0  # run.json records the scale
    after = [r for r in one.metric_rows() if r["step"] > 20]
    assert all(r["noise_scale"] == 1.0 and r["noise_noise_norm"] > 0 for r in after)


def plain_loop(parent, step: int, end: int, scale: float, every: int) -> dict:
    """The branch written out by hand on the HookedTransformer itself: per step the minibatch
    gradient g_B (the batch order's), the full-batch gradient ḡ (recomputed every `every` steps,
    as the branch does), g = ḡ + C (g_B - ḡ), clipping at 1.0 and AdamW from the parent's
    state. Returns the weights at `end`."""
    cfg = parent.config
    model = parent.model_at(step)
    tokens = parent.task_data.tokens
    first = cfg.task.first_target_pos
    params = list(model.parameters())
    opt = make_optimizer(cfg, params)  # torch's AdamW (fused), as the parent's state says
    opt.load_state_dict(read_state(parent.state_path_at(step), cfg)["optimizer"])

    def loss(batch):
        logits = model(batch)[:, first:-1]
        return torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), batch[:, first + 1 :].reshape(-1)
        )

    order, mean = BatchOrder(len(tokens), cfg.batch_size, cfg.seed), None
    for s in range(step + 1, end + 1):
        if mean is None or (s - 1) % every == 0:
            mean = torch.autograd.grad(loss(tokens), params)
        g_b = torch.autograd.grad(loss(tokens[order.indices(s)]), params)
        for p, m, g in zip(params, mean, g_b):  # in the parameter's layout: fused AdamW
            p.grad = torch.empty_like(p).copy_(m + scale * (g - m))  # misreads another one
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
    return model.state_dict()


@pytest.mark.parametrize("scale", [0.0, 2.0])
def test_a_scaled_step_is_the_hand_written_one(parent, tmp_path, scale):
    child = sl.branch(parent, 20, tmp_path / "b", noise_scale=scale, steps=40)
    want = plain_loop(parent, 20, 40, scale, REFRESH_EVERY)
    got = child.model_at(40).state_dict()
    for name, value in want.items():
        if name.endswith("b_K") or not value.is_floating_point():
            continue  # b_K's gradient is 0 up to rounding (softmax ignores a shift of every
            # key's score), which AdamW's division blows up to steps of lr: no oracle there
        torch.testing.assert_close(got[name], value, atol=2e-6, rtol=1e-5, msg=name)
    # and it is not the ordinary step: the noise changed something
    ordinary = sl.branch(parent, 20, tmp_path / "o", steps=40).model_at(40).state_dict()
    assert not torch.allclose(got["blocks.0.attn.W_Q"], ordinary["blocks.0.attn.W_Q"])


def test_a_killed_noise_branch_resumes_exactly(parent, tmp_path, monkeypatch):
    """Killed at step 40's evaluation, it resumes from step 30's state: step 31 is no refresh
    step (30 % 4 != 0), so it runs on the ḡ the state kept."""
    assert 30 % REFRESH_EVERY != 0
    whole = sl.branch(parent, 20, tmp_path / "whole", noise_scale=0.5)
    cfg = make_branch(parent, 20, tmp_path / "killed", Changes(noise_scale=0.5))
    from selector_lens.training import trainer

    calls = {"n": 0}
    real = trainer.evaluate

    def dies(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:  # the branch's second evaluation: step 40
            raise KeyboardInterrupt
        return real(*a, **k)

    with monkeypatch.context() as m:
        m.setattr(trainer, "evaluate", dies)
        with pytest.raises(KeyboardInterrupt):
            train_many([cfg], [tmp_path / "killed"], resume=True)
    assert "noise" in torch.load(tmp_path / "killed" / "ckpt" / "last.pt", weights_only=True)
    (resumed,) = train_many([cfg], [tmp_path / "killed"], resume=True)
    assert logged(resumed) == logged(whole)


def test_the_records_against_hand_computed_values(parent, tmp_path, monkeypatch):
    """SGD without momentum, decay or clipping, C = 0 and ḡ every step: the update is -lr ḡ,
    so its norm and its component down ḡ are both lr |ḡ|, and the step is ḡ's."""
    monkeypatch.setattr(branching, "REFRESH_EVERY", 1)
    lr = 0.05
    options = {"optimizer": "sgd", "weight_decay": 0.0, "grad_clip": 0.0, "lr": lr, "steps": 30}
    child = sl.branch(parent, 20, tmp_path / "sgd", options, noise_scale=0.0)
    (row,) = [r for r in child.metric_rows() if r["step"] == 30]
    assert row["noise_clip"] == 0.0
    assert row["noise_update_norm"] == pytest.approx(lr * row["noise_mean_grad_norm"], rel=1e-4)
    assert row["noise_update_along_mean"] == pytest.approx(row["noise_update_norm"], rel=1e-4)
    assert row["noise_staleness"] > 0  # ḡ moved between the steps
    # clipping that always binds is counted at every step
    tight = sl.branch(
        parent, 20, tmp_path / "tight", {"grad_clip": 1e-6, "steps": 30}, noise_scale=1
    )
    (row,) = [r for r in tight.metric_rows() if r["step"] == 30]
    assert row["noise_clip"] == 1.0


def test_the_reference_batch_is_a_seeded_draw_when_the_set_is_larger():
    noise = NoiseScale(0.0, n_examples=1000, batch_size=16, seed=3)
    assert noise.rows == 256 and noise.due(1) and noise.due(1 + REFRESH_EVERY)
    seen = []
    model = torch.nn.Linear(2, 1, bias=False)

    def batch_of(index, step):
        seen.append(index.clone())
        return index.float()

    def losses(model, batch):
        return model.weight.sum() * batch.mean()

    noise.refresh(model, 5, batch_of, losses)
    again = NoiseScale(0.0, n_examples=1000, batch_size=16, seed=3)
    again.refresh(model, 5, batch_of, losses)
    first, second = torch.cat(seen[: len(seen) // 2]), torch.cat(seen[len(seen) // 2 :])
    assert torch.equal(first, second) and len(set(first.tolist())) == 256  # no repeats
    # ḡ of a loss linear in the weight: d/dw (w.sum() x mean over chunks) = the rows' mean
    assert noise.mean[0].flatten().tolist() == pytest.approx([first.float().mean().item()] * 2)


def test_the_cli_branches_with_a_noise_scale_and_refuses_a_bad_one(parent, tmp_path):
    r = cli("branch", "--from", parent.path, "--step", 40, "--out", tmp_path / "q",
            "--noise-scale", "0", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert sl.Run.open(tmp_path / "q").info["branch"]["noise_scale"] == 0.0
    bad = cli("branch", "--from", parent.path, "--step", 40, "--out", tmp_path / "bad",
              "--noise-scale", "-1")  # fmt: skip
    assert bad.returncode == 2 and "noise_scale must be a number >= 0" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and not (tmp_path / "bad").exists()
    assert Changes(noise_scale=0.5).label == "noise0.5" and Changes().label == "same"
