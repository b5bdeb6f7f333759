import pytest
import torch

import selector_lens as sl

torch.set_num_threads(1)  # tiny models: threads only add overhead and noise


def tiny(**kw) -> sl.TrainConfig:
    """A config that trains in about a second: K=3, 12 bases, a 2-layer model."""
    task = sl.SelectorTask(**{"k": 3, "n_bases": 12, **kw.pop("task", {})})
    model = sl.ModelConfig(**{"n_layers": 2, "n_heads": 2, "d_model": 32, "d_head": 16, "d_mlp": 64, **kw.pop("model", {})})
    base = dict(steps=40, batch_size=16, lr=3e-3, eval_every=10, ckpt_every=20)
    return sl.TrainConfig(task=task, model=model, **{**base, **kw})


@pytest.fixture
def tiny_cfg():
    return tiny()


def train_until_killed(cfg, out, monkeypatch, evals: int):
    """Train `cfg` into `out` but die (KeyboardInterrupt) on the `evals`-th evaluation."""
    from selector_lens import trainer

    calls = {"n": 0}
    real = trainer.evaluate

    def dies(*a, **k):
        calls["n"] += 1
        if calls["n"] == evals:
            raise KeyboardInterrupt
        return real(*a, **k)

    with monkeypatch.context() as m:
        m.setattr(trainer, "evaluate", dies)
        with pytest.raises(KeyboardInterrupt):
            sl.train(cfg, out=out)
