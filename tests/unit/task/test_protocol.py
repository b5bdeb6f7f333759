"""The task protocol and its second built-in, modular addition: data, the Fourier progress
measure and the evaluation against hand-computed values; config round trips; loading a user's
task class and refusing one that does not implement the protocol."""

import math
import sys
from pathlib import Path

import pytest
import torch

import selector_lens as sl
from selector_lens.config import TrainConfig, from_options
from selector_lens.errors import SelectorLensError
from selector_lens.task.induction import InductionTask
from selector_lens.task.modular import ModularTask, fourier_share
from selector_lens.task.protocol import MEMBERS, Task, task_class


def test_the_built_ins_implement_the_protocol():
    for cls in (sl.SelectorTask, ModularTask, InductionTask):
        assert all(hasattr(cls, m) for m in MEMBERS)
        assert isinstance(cls(), Task)
    assert task_class("selector") is sl.SelectorTask and task_class("modular") is ModularTask


def test_modular_data_is_every_pair_once_with_its_sum():
    task = ModularTask(p=7, train_frac=0.4, seed=3)
    data = task.generate()
    assert task.n_examples == round(0.4 * 49) == len(data.tokens)
    assert len(set(data.train_pairs)) == task.n_examples  # no pair twice
    a, b, eq, c = data.tokens.T
    assert torch.equal(c, (a + b) % 7) and (eq == 7).all() and task.d_vocab == 8
    assert int(data.is_train.sum()) == task.n_examples
    assert torch.equal(data.all_tokens[data.train_pairs], data.tokens)  # a * p + b order
    again = task.load(data.to_json())
    assert torch.equal(again.tokens, data.tokens)
    assert ModularTask(p=7, train_frac=0.4, seed=4).generate().train_pairs != data.train_pairs


def test_fourier_share_of_one_frequency_is_one_and_of_noise_is_small():
    p, k = 13, 3
    a = torch.arange(p, dtype=torch.float64)
    one = torch.stack([torch.cos(2 * math.pi * k * a / p), torch.sin(2 * math.pi * k * a / p)], 1)
    assert fourier_share(one, top=1) == pytest.approx(1.0)
    two = torch.cat([one, torch.cos(2 * math.pi * 5 * a / p)[:, None]], 1)  # energies 2 : 1
    assert fourier_share(two, top=1) == pytest.approx(p / 2 * 2 / (p / 2 * 3))
    assert fourier_share(two, top=2) == pytest.approx(1.0)
    # white noise spreads its energy: the top 2 of 6 frequencies hold about a third
    noise = torch.randn(p, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert 0.3 < fourier_share(noise, top=2) < 0.5


def test_modular_evaluation_is_the_hand_computed_one():
    task = ModularTask(p=11, train_frac=0.5, seed=0)
    cfg = from_options(
        {"task": "modular", "p": 11, "train_frac": 0.5, "data_seed": 0, "n_layers": 1}
    )
    from selector_lens.model.adapter import build_model

    model = build_model(cfg.model, task, seed=1)
    data = task.generate()
    row = task.evaluate(model, task.eval_set(data))
    with torch.no_grad():
        logits = model(data.all_tokens)[:, 2, :11]  # TransformerLens's own forward
    losses = torch.nn.functional.cross_entropy(logits, data.all_tokens[:, 3], reduction="none")
    right = (logits.argmax(-1) == data.all_tokens[:, 3]).float()
    train = data.is_train
    assert row["loss"] == pytest.approx(float(losses[train].mean()), abs=1e-5)
    assert row["test_loss"] == pytest.approx(float(losses[~train].mean()), abs=1e-5)
    assert row["train_acc"] == pytest.approx(float(right[train].mean()))
    assert row["test_acc"] == pytest.approx(float(right[~train].mean()))
    assert set(row) == set(task.metrics)


def test_configs_round_trip_and_name_their_task():
    cfg = from_options({"task": "modular", "p": 7, "steps": 10})
    assert cfg.name == "modular-p7-s42" and cfg.to_dict()["task"]["name"] == "modular"
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    assert from_options(cfg.options()) == cfg
    selector = from_options({"k": 5})
    assert "name" not in selector.to_dict()["task"]  # the selector's run.json as before
    assert selector.name == "k5-nb1000-s42"
    with pytest.raises(SelectorLensError, match="k is an option of the selector task"):
        from_options({"task": "modular", "k": 5})
    with pytest.raises(SelectorLensError, match="unknown task 'nope'"):
        from_options({"task": "nope"})


GOOD = """
from dataclasses import dataclass
from selector_lens.task.modular import ModularTask

@dataclass(frozen=True)
class Mine(ModularTask):
    name = "mine"
"""

BAD = """
from dataclasses import dataclass

@dataclass(frozen=True)
class Half:
    name = "half"
    seq_len = 3

    def generate(self):
        return None
"""


def test_a_users_task_loads_from_a_file_and_a_half_one_is_one_line(tmp_path):
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "bad.py").write_text(BAD)
    cls = task_class(f"{tmp_path / 'good.py'}:Mine")
    assert cls.name == "mine" and isinstance(cls(p=5), Task)
    with pytest.raises(SelectorLensError) as e:
        task_class(f"{tmp_path / 'bad.py'}:Half")
    assert "does not implement the task protocol: missing d_vocab, loss_start" in str(e.value)
    with pytest.raises(SelectorLensError, match="has no Nope"):
        task_class(f"{tmp_path / 'good.py'}:Nope")
    with pytest.raises(SelectorLensError, match="does not exist"):
        task_class(f"{tmp_path / 'missing.py'}:Mine")
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(SelectorLensError, match="failed to load: RuntimeError: boom"):
        task_class(f"{tmp_path / 'broken.py'}:X")


def test_induction_sequences_repeat_a_segment_at_a_varying_offset():
    task = InductionTask(vocab=16, length=20, segment=5, n_sequences=300, seed=1)
    data = task.generate()
    x = data.tokens
    assert x.shape == (300, 20) and (x[:, 0] == 0).all() and (x[:, 1:] >= 1).all()
    for row, a, b in zip(x.tolist(), data.first, data.second):
        assert 1 <= a and a + 5 <= b <= 20 - 5 and row[a : a + 5] == row[b : b + 5]
    offsets = {b - a for a, b in zip(data.first, data.second)}
    assert len(offsets) > 5  # the offset varies (a fixed one is solved by position alone)
    assert int(data.predictable.sum()) == 300 * 4  # each repeat's tokens after its first
    again = task.load(data.to_json())
    assert torch.equal(again.tokens, x)
    held_out = task.eval_set(data)
    assert held_out.tokens.shape[1] == 20 and not torch.equal(held_out.tokens[:300], x)


def test_induction_scores_are_the_attention_transformer_lens_caches():
    task = InductionTask(vocab=16, length=20, segment=5, n_sequences=10, seed=2)
    cfg = from_options(
        {
            "task": "induction",
            "vocab": 16,
            "length": 20,
            "segment": 5,
            "n_sequences": 10,
            "n_layers": 2,
            "attn_only": True,
            "d_model": 32,
            "d_head": 8,
        }  # fmt: skip
    )
    from selector_lens.model.adapter import build_model

    model = build_model(cfg.model, task, seed=3)
    es = task.eval_set(task.generate())
    row = task.evaluate(model, es)
    with torch.no_grad():
        logits, cache = model.run_with_cache(es.tokens)
    losses = torch.nn.functional.cross_entropy(
        logits[:, :-1].flatten(0, 1), es.tokens[:, 1:].flatten(), reduction="none"
    ).view(len(es.tokens), -1)
    assert row["repeat_loss"] == pytest.approx(float(losses[es.predictable].mean()), abs=1e-5)
    assert row["other_loss"] == pytest.approx(float(losses[~es.predictable].mean()), abs=1e-5)
    for layer in range(2):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"]  # [n, head, query, key]
        for head in range(model.cfg.n_heads):
            prev = [pattern[:, head, i, i - 1].mean() for i in range(1, 20)]
            assert row["prev_token_score"][layer][head] == pytest.approx(
                float(torch.stack(prev).mean()), abs=1e-5
            )
            pairs = [
                pattern[i, head, b + j, a + j + 1]
                for i, (a, b) in enumerate(zip(es.first, es.second))
                for j in range(4)
            ]
            assert row["induction_score"][layer][head] == pytest.approx(
                float(torch.stack(pairs).mean()), abs=1e-5
            )


def test_a_task_class_made_in_python_is_named_so_that_it_loads_again(tmp_path):
    import importlib.util

    from selector_lens.task.protocol import task_name

    assert task_name(ModularTask()) == "modular" and task_name(sl.SelectorTask()) == "selector"
    (tmp_path / "mine.py").write_text(GOOD)
    spec = importlib.util.spec_from_file_location("not_importable_mine", tmp_path / "mine.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["not_importable_mine"] = module  # as a module loaded by hand is registered
    spec.loader.exec_module(module)
    name = task_name(module.Mine(p=5))
    assert name == f"{(tmp_path / 'mine.py').resolve()}:Mine"
    cfg = TrainConfig(task=module.Mine(p=5))
    again = TrainConfig.from_dict(cfg.to_dict())
    assert again.task.p == 5 and type(again.task).__name__ == "Mine"


def test_the_grokking_gap_is_read_from_the_rows():
    def row(step, train, test, share):
        return {"step": step, "train_acc": train, "test_acc": test, "fourier_share": share}

    rows = [row(0, 0.01, 0.01, 0.1), row(100, 0.995, 0.05, 0.2), row(900, 1.0, 0.96, 0.6)]
    got = ModularTask(p=7).grokking(rows)
    assert got["train_solved_step"] == 100 and got["test_solved_step"] == 900
    assert (
        got["fourier_share_at_train_solved"] == 0.2 and got["fourier_share_at_test_solved"] == 0.6
    )
    assert ModularTask(p=7).grokking(rows[:2])["test_solved_step"] is None
    assert ModularTask(p=7).transition(rows) == 900


PUBLISHED_MODULAR = (
    Path(__file__).resolve().parents[3] / "analyses" / "results" / "tasks" / "modular"
)


@pytest.mark.skipif(not (PUBLISHED_MODULAR / "summary.json").is_file(), reason="not published")
def test_the_published_grokking_summary_is_its_runs():
    import json

    summary = json.loads((PUBLISHED_MODULAR / "summary.json").read_text())
    run = sl.Run.open(PUBLISHED_MODULAR / "runs" / summary["run"])
    assert {**run.config.task.grokking(run.metric_rows()), "run": summary["run"]} == summary


PUBLISHED_TASKS = PUBLISHED_MODULAR.parent


@pytest.mark.parametrize("task", ["modular", "induction"])
def test_a_published_task_summary_and_dashboard_come_from_its_runs(task, tmp_path):
    import json

    from selector_lens.analysis.tables import task_result
    from selector_lens.viz.dashboard import run_dashboard

    folder = PUBLISHED_TASKS / task
    if not (folder / "summary.json").is_file():
        pytest.skip("not published")
    summary = json.loads((folder / "summary.json").read_text())
    run = sl.Run.open(folder / "runs" / summary["run"])
    assert not run.has_weights  # everything below is read from the published store
    assert {"run": summary["run"], **task_result(run)} == summary
    page = run_dashboard(run, tmp_path / "d.html").read_text()
    assert "Left out" not in page and "Attention explorer" in page
