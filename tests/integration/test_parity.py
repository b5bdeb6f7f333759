"""Parity with the paper's own code (`parity="paper"`), checked against a run of that code
(`../shared/fixtures/synass-k10/`, made on this machine; see its README), and its import."""

import json
import os
import pickle
from pathlib import Path

import pytest
import torch

import selector_lens as sl
from selector_lens.analysis.ablation import training_set_ablation
from selector_lens.errors import SelectorLensError
from selector_lens.model.adapter import build_model, rng_after_init
from selector_lens.paper.importer import config_from_paper, import_run
from selector_lens.task.paper import PaperBatchOrder
from selector_lens.training.trainer import lr_at, train_step
from tests.helpers import tiny

FIXTURE = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "synass-k10"
needs_fixture = pytest.mark.skipif(
    not (FIXTURE / "config.yaml").is_file(),
    reason=f"the paper-code fixture {FIXTURE} is absent (../shared not mounted)",
)
PAPER_TASK = sl.SelectorTask(k=10, n_bases=1000, seed=42, parity="paper")


class Code:
    """A pickle that would run code when unpickled."""

    def __reduce__(self):
        return (os.system, ("touch /tmp/selector-lens-pwned",))


@pytest.fixture(scope="module")
def paper_data():
    return PAPER_TASK.generate()


@needs_fixture
def test_parity_data_is_the_papers_string_for_string(paper_data):
    theirs = [json.loads(line) for line in (FIXTURE / "examples.jsonl").read_text().splitlines()]
    ours = [
        {"b": paper_data.bases[g], "z": paper_data.zs[i], "a": paper_data.targets[g][i]}
        for g in range(1000)
        for i in range(10)
    ]
    assert ours == theirs
    # the tokenizer's ids: PAD 0, BOS 1, EOS 2, SEP 3, characters 4..39
    first = theirs[0]
    chars = "abcdefghijklmnopqrstuvwxyz0123456789"
    want = [
        1,
        *[4 + chars.index(c) for c in first["b"]],
        3,
        *[4 + chars.index(c) for c in first["z"]],
        3,
        *[4 + chars.index(c) for c in first["a"]],
        2,
    ]
    assert paper_data.tokens[0].tolist() == want


@needs_fixture
def test_parity_initial_weights_are_the_papers():
    ref = torch.load(FIXTURE / "checkpoints" / "step_000000" / "model.pt", weights_only=True)
    for seed in (42, 7):  # the paper's model factory seeds with 42 whatever the run's seed
        mine = build_model(sl.ModelConfig(), PAPER_TASK, seed).state_dict()
        assert mine.keys() == ref.keys()
        for k in ref:
            torch.testing.assert_close(mine[k], ref[k], atol=1e-6, rtol=0)


@needs_fixture
@pytest.mark.slow
def test_100_parity_steps_track_the_papers_loss_and_weights(paper_data):
    cfg = sl.TrainConfig(task=PAPER_TASK)
    model = build_model(cfg.model, cfg.task, cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    order = PaperBatchOrder(
        cfg.task.n_examples, cfg.batch_size, rng_after_init(cfg.model, cfg.task)
    )
    losses = []
    for step in range(1, 101):
        for g in opt.param_groups:
            g["lr"] = lr_at(cfg, step)
        batch = paper_data.tokens[order.indices(step)][None]
        losses.append(
            train_step([model], [opt], batch, cfg.task.first_target_pos, cfg.grad_clip).item()
        )
    history = json.loads((FIXTURE / "training_history.json").read_text())
    # its train loss at steps 50 and 100 is the mean of the last 50 steps' losses: same batches, same loss
    assert sum(losses[:50]) / 50 == pytest.approx(history["train_loss"][0], abs=1e-5)
    assert sum(losses[50:]) / 50 == pytest.approx(history["train_loss"][1], abs=1e-5)
    ref = torch.load(FIXTURE / "checkpoints" / "step_000100" / "model.pt", weights_only=True)
    drift = max(
        (model.state_dict()[k] - ref[k]).abs().max().item()
        for k in ref
        if ref[k].is_floating_point()
    )
    assert drift < 1e-3  # float drift of another forward pass (measured: 1.3e-4 after 100 steps)


def test_paper_batch_order_is_an_epoch_permutation_with_a_short_last_batch():
    order = PaperBatchOrder(300, 128, torch.random.default_generator.get_state())
    epoch = torch.cat([order.indices(s) for s in (1, 2, 3)])
    assert [len(order.indices(s)) for s in (1, 2, 3)] == [128, 128, 44]
    assert sorted(epoch.tolist()) == list(range(300))
    assert not torch.equal(order.indices(4), order.indices(1))  # a new permutation each epoch
    assert order.examples_seen(3) == 300 and order.examples_seen(4) == 428


@needs_fixture
def test_parity_lr_for_the_fixtures_config_is_constant_at_every_step():
    import yaml

    cfg = config_from_paper(yaml.safe_load((FIXTURE / "config.yaml").read_text()))
    assert cfg.task.parity == "paper" and cfg.schedule == "constant" and cfg.steps == 50_000
    assert {lr_at(cfg, s) for s in range(1, cfg.steps + 1)} == {0.001}


def test_parity_cosine_is_the_papers_lambda_lr():
    # the paper's batch-size runs: warm-up 500 from lambda(0) = 0, then a cosine to 0 at 10,000
    cfg = sl.TrainConfig(
        task=PAPER_TASK, schedule="cosine", warmup_steps=500, cosine_steps=10_000, steps=12_000
    )
    assert lr_at(cfg, 1) == 0.0 and lr_at(cfg, 251) == pytest.approx(cfg.lr / 2)
    assert lr_at(cfg, 501) == cfg.lr  # lambda(500): the cosine at 0
    half = 0.5 * (1 + torch.cos(torch.tensor(0.5 * 3.14159)).item())  # float32, pi as 3.14159
    assert lr_at(cfg, 5251) == pytest.approx(cfg.lr * half, rel=1e-7)
    assert abs(lr_at(cfg, 10_001)) < 1e-10 and lr_at(cfg, 3701) < lr_at(cfg, 3700)
    with pytest.raises(SelectorLensError, match="cosine_steps must exceed warmup_steps"):
        sl.TrainConfig(task=PAPER_TASK, warmup_steps=500, cosine_steps=500)


def test_parity_trains_and_resumes_on_a_tiny_config(tmp_path):
    cfg = tiny(task={"parity": "paper"}, steps=30)
    run = sl.train(cfg, out=tmp_path / "p")
    assert run.info["config"]["task"]["parity"] == "paper"
    assert run.task_data.to_json() == cfg.task.generate().to_json()
    assert build_model(cfg.model, cfg.task).cfg.n_ctx == 32


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    return import_run(FIXTURE, tmp_path_factory.mktemp("imp") / "run")


@needs_fixture
@pytest.mark.slow
def test_import_reproduces_the_fixtures_ablation_table(imported):
    assert imported.steps == [0, 100, 500, 1800, 3700]
    assert imported.config.task.parity == "paper" and imported.status == "finished"
    rows = imported.metric_rows()
    assert all(r["candidate_loss"] is not None and r["dz"] is not None for r in rows)
    want = json.loads((FIXTURE / "ablation.json").read_text())["3700"]
    table = training_set_ablation(imported, [3700])
    top = table.sort_values("d_loss", ascending=False).iloc[0]
    assert top.label == want["top"]
    for r in table.itertuples():
        for key in ("d_loss", "d_first", "d_cand"):
            assert getattr(r, key) == pytest.approx(want["heads"][r.label][key], abs=0.05)
    # our own ablate-head, on our evaluation set, names the same head by Δ training loss
    ours = sl.ablate_each_head(imported, [3700])
    assert ours.loc[ours.delta_loss.idxmax(), "heads"] == want["top"]


def test_a_malformed_folder_gets_one_line(tmp_path):
    with pytest.raises(SelectorLensError, match="has no config.yaml"):
        import_run(tmp_path, tmp_path / "out")
    (tmp_path / "config.yaml").write_text("data: {k: 3}\n")
    with pytest.raises(SelectorLensError, match="experiment.seed is missing; data.n_unique_b is"):
        import_run(tmp_path, tmp_path / "out")


def test_a_crafted_pickle_is_refused_and_never_run(tmp_path):
    marker = Path("/tmp/selector-lens-pwned")
    marker.unlink(missing_ok=True)
    cfg = {
        "experiment": {"seed": 1},
        "data": {"n_unique_b": 4, "k": 3, "split_by_base": True, "probe_fraction": 0.0},
        "model": {"n_layers": 1, "n_heads": 2, "d_model": 32, "d_head": 16, "d_mlp": 64},
        "training": {"batch_size": 8},
    }
    import yaml

    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    step = tmp_path / "checkpoints" / "step_000010"
    step.mkdir(parents=True)
    (step / "model.pt").write_bytes(pickle.dumps(Code()))
    with pytest.raises(SelectorLensError, match="refused to unpickle"):
        import_run(tmp_path, tmp_path / "out")
    # and a run directory's resume state
    run = sl.train(tiny(steps=20), out=tmp_path / "r")
    run.state_path.write_bytes(pickle.dumps({"step": Code()}))
    with pytest.raises(SelectorLensError, match=r"corrupt checkpoint: .*last.pt"):
        sl.train(tiny(steps=40), out=tmp_path / "r", resume=True)
    assert not marker.exists()


def test_checkpoints_written_before_parity_existed_still_belong_to_their_runs():
    from selector_lens.model.adapter import config_hash

    # the hash checkpoints of this config carried before the parity field was added
    assert (
        config_hash(sl.SelectorTask(k=10, n_bases=1000, seed=44), sl.ModelConfig())
        == "29cc1261a3264a80"
    )
    assert config_hash(PAPER_TASK, sl.ModelConfig()) != config_hash(
        sl.SelectorTask(k=10, n_bases=1000), sl.ModelConfig()
    )
