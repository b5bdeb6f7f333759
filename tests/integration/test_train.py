import math
import subprocess

import pytest
import torch

import selector_lens as sl
from selector_lens.model.adapter import load_weights, save_weights
from selector_lens.runs import rundir
from selector_lens.task.order import BatchOrder
from selector_lens.training.trainer import lr_at
from tests.helpers import tiny, train_until_killed

KEYS = (
    "step",
    "examples_seen",
    "loss",
    "first_target_loss",
    "candidate_loss",
    "candidate_acc",
    "dz",
    "token_acc",
    "attn_to_z",
    "group_correct",
)


def test_run_directory_and_metrics(tmp_path, tiny_cfg):
    run = sl.train(tiny_cfg, out=tmp_path / "r")
    assert {p.name for p in run.path.iterdir()} == {
        "run.json",
        "data.json",
        "metrics.jsonl",
        "ckpt",
    }
    assert run.steps == [0, 20, 40]
    assert run.status == "finished" and run.config == tiny_cfg
    m = run.metrics
    assert list(m.step) == [0, 10, 20, 30, 40] and set(KEYS) <= set(m.columns)
    assert list(m.examples_seen) == [BatchOrder(36, 16, 42).examples_seen(s) for s in m.step]
    assert (
        m.examples_seen.iloc[2] == 6 * 36 + 2 * 16
    )  # step 20: 6 epochs of 3 batches (16, 16, 4) + 2
    assert len(m.attn_to_z[0]) == 2 and len(m.attn_to_z[0][0]) == 2
    assert run.task_data.to_json() == tiny_cfg.task.generate().to_json()
    assert (run.path / "ckpt" / "last.pt").is_file()


def test_checkpoint_round_trip_gives_identical_logits(tmp_path):
    cfg = tiny()
    model = sl.build_model(cfg.model, cfg.task, seed=7)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    save_weights(model, tmp_path / "w.safetensors", step=5, cfg_hash="abc")
    fresh = sl.build_model(cfg.model, cfg.task, seed=8)
    assert load_weights(fresh, tmp_path / "w.safetensors", "abc") == 5
    x = cfg.task.generate().tokens
    assert torch.equal(model(x), fresh(x))


def test_model_at_loads_the_trained_weights(tmp_path, tiny_cfg):
    run = sl.train(tiny_cfg, out=tmp_path / "r")
    a, b = run.model_at(40), run.model_at(0)
    x = run.task_data.tokens
    assert not torch.equal(a(x), b(x))
    from selector_lens.task.eval_set import make_eval_set

    again = sl.evaluate(a, make_eval_set(run.task_data, tiny_cfg.eval_groups, seed=tiny_cfg.seed))
    assert again["loss"] == pytest.approx(run.metrics.loss.iloc[-1], abs=1e-6)


def test_resume_equals_uninterrupted(tmp_path, monkeypatch):
    cfg = tiny(steps=60)
    full = sl.train(cfg, out=tmp_path / "full").metric_rows()

    train_until_killed(
        cfg, tmp_path / "killed", monkeypatch, evals=7
    )  # after the step-40 ckpt, at the step-60 eval
    killed = sl.Run.open(tmp_path / "killed")
    assert killed.status == "running" and killed.steps == [0, 20, 40]
    resumed = sl.train(cfg, out=tmp_path / "killed", resume=True).metric_rows()
    assert [r["step"] for r in resumed] == [r["step"] for r in full]
    for a, b in zip(full, resumed):
        for key in KEYS:
            assert a[key] == b[key], (a["step"], key)


def test_a_run_killed_before_its_first_checkpoint_logs_step_0_once(tmp_path, monkeypatch):
    cfg = tiny(steps=40)
    full = sl.train(cfg, out=tmp_path / "full").metric_rows()
    train_until_killed(cfg, tmp_path / "k", monkeypatch, evals=2)  # state at 0, dies at step 10
    assert sl.Run.open(tmp_path / "k").steps == [0]
    resumed = sl.train(cfg, out=tmp_path / "k", resume=True).metric_rows()
    assert [r["step"] for r in resumed] == [0, 10, 20, 30, 40]
    assert [r["loss"] for r in resumed] == [r["loss"] for r in full]


def test_resume_can_extend_the_step_budget(tmp_path):
    run = sl.train(tiny(steps=20), out=tmp_path / "r")
    run = sl.train(tiny(steps=40), out=tmp_path / "r", resume=True)
    assert run.steps == [0, 20, 40] and [r["step"] for r in run.metric_rows()] == [
        0,
        10,
        20,
        30,
        40,
    ]


def test_early_stop_once_solved_for_a_while(tmp_path):
    run = sl.train(tiny(steps=400, early_stop_evals=3), out=tmp_path / "r")
    m = run.metrics
    assert run.status == "early_stopped" and m.step.iloc[-1] < 400
    assert (m.candidate_loss.iloc[-3:] < 0.05 * math.log(3)).all()
    assert run.steps[-1] == m.step.iloc[-1]  # the stopping step is checkpointed
    below = m.step[m.candidate_loss < 0.5 * math.log(3)]  # τ's definition, applied by hand
    assert run.info["summary"]["tau"] == below.iloc[0] < m.step.iloc[-1]


@pytest.mark.parametrize(
    "direction,row,want",
    [
        ("bz_to_a", {"candidate_loss": 0.05 * math.log(3) - 1e-9, "loss": 9.0}, True),
        ("bz_to_a", {"candidate_loss": 0.05 * math.log(3) + 1e-9, "loss": 0.0}, False),
        ("b_to_a", {"candidate_loss": 0.0, "loss": 0.0}, False),  # its floor is log K: never solved
        (
            "a_to_b",
            {"candidate_loss": None, "loss": 0.05 - 1e-9},
            True,
        ),  # no candidates: the token loss, in nats
        ("a_to_b", {"candidate_loss": None, "loss": 0.05 + 1e-9}, False),
        ("az_to_b", {"candidate_loss": None, "loss": 0.049}, True),
        ("az_to_b", {"candidate_loss": None, "loss": 0.2}, False),
    ],
)
def test_solved_line_per_direction(direction, row, want):
    from selector_lens.training.trainer import solved

    assert solved(tiny(task={"direction": direction}), row, {}) is want


@pytest.mark.parametrize(
    "row,want",
    [
        ({"token_acc": 0.95, "first_target_loss": 0.399}, True),  # both lines reached
        ({"token_acc": 0.949, "first_target_loss": 0.0}, False),  # accuracy short
        ({"token_acc": 1.0, "first_target_loss": 0.4}, False),  # lag rule: strictly below 0.1 x 4.0
    ],
)
def test_accuracy_stop_needs_accuracy_and_the_papers_lag_rule(row, want):
    from selector_lens.training.trainer import solved

    for direction in ("bz_to_a", "a_to_b"):
        full = {"candidate_loss": 9.0, "loss": 9.0, **row}
        cfg = tiny(task={"direction": direction}, early_stop_acc=0.95)  # replaces the loss line
        assert solved(cfg, full, {"first_target_loss": 4.0}) is want


def test_an_accuracy_stopped_run_stops_after_its_evals_in_a_row(tmp_path):
    cfg = tiny(steps=200, eval_every=10, early_stop_acc=0.01, early_stop_evals=2)
    rows = sl.train(cfg, out=tmp_path / "r").metric_rows()
    first = rows[0]["first_target_loss"]
    hits = [r["step"] for r in rows if r["first_target_loss"] < 0.1 * first]
    assert hits, "the tiny run should reach the lag line within 200 steps"
    streak = next(s for s in hits if s + 10 in hits)  # the first two evals in a row
    assert rows[-1]["step"] == streak + 10


def test_batch_order_is_a_fresh_permutation_each_epoch():
    order = BatchOrder(10, 4, seed=1)
    epoch0 = torch.cat([order.indices(s) for s in (1, 2, 3)])
    epoch1 = torch.cat([order.indices(s) for s in (4, 5, 6)])
    assert sorted(epoch0.tolist()) == sorted(epoch1.tolist()) == list(range(10))
    assert not torch.equal(epoch0, epoch1)
    assert torch.equal(BatchOrder(10, 4, seed=1).indices(5), order.indices(5))


def test_lr_schedules():
    cfg = tiny(steps=110, warmup_steps=10, schedule="cosine")
    assert lr_at(cfg, 5) == pytest.approx(cfg.lr / 2)
    assert lr_at(cfg, 10) == pytest.approx(cfg.lr)
    assert lr_at(cfg, 60) == pytest.approx(cfg.lr / 2)
    assert lr_at(cfg, 110) == pytest.approx(0.0, abs=1e-12)
    assert lr_at(tiny(), 1000) == tiny().lr
    longer = tiny(steps=300, warmup_steps=10, schedule="cosine", cosine_steps=110)  # 0 from 110 on
    assert lr_at(longer, 60) == pytest.approx(cfg.lr / 2) and lr_at(longer, 200) == 0.0


def test_reverse_direction_records_what_is_defined(tmp_path):
    run = sl.train(tiny(task={"direction": "a_to_b"}, steps=10), out=tmp_path / "r")
    row = run.metric_rows()[-1]
    assert row["candidate_loss"] is None and row["dz"] is None and row["attn_to_z"] is None
    assert row["loss"] > 0 and run.tau() is None


# --- bad input: one clear error naming the problem -----------------------------------------


@pytest.mark.parametrize(
    "kw,words",
    [
        ({"lr": 0}, "lr must be positive"),
        ({"early_stop_acc": 1.5}, "early_stop_acc must be in"),
        ({"batch_size": 0}, "batch_size"),
        ({"steps": -1}, "steps"),
        ({"eval_groups": "most"}, "eval_groups"),
        ({"device": "tpu"}, "unknown device"),
    ],
)
def test_bad_train_config(kw, words):
    with pytest.raises(sl.SelectorLensError, match=words):
        tiny(**kw)


def test_out_holding_another_run(tmp_path):
    sl.train(tiny(steps=10), out=tmp_path / "r")
    with pytest.raises(sl.SelectorLensError, match=r"holds a different run \(lr: 0.003 != 0.001"):
        sl.train(tiny(steps=10, lr=1e-3), out=tmp_path / "r", resume=True)
    with pytest.raises(sl.SelectorLensError, match="already holds this run; pass --resume"):
        sl.train(tiny(steps=10), out=tmp_path / "r")


def test_a_run_being_trained_elsewhere_is_refused(tmp_path):
    """Two processes training one run would interleave its log: the second is refused by name,
    and the run trains once the lock is given up (it is, too, after a refused resume)."""
    out = tmp_path / "r"
    held = rundir.Lock(out)  # another open file: flock refuses it as it would another process
    with pytest.raises(
        sl.SelectorLensError, match=rf"{out} is being trained by another process \(pid \d+\)"
    ):
        sl.train(tiny(steps=10), out=out)
    held.release()
    assert sl.train(tiny(steps=10), out=out).metric_rows()[-1]["step"] == 10
    with pytest.raises(sl.SelectorLensError, match="holds a different run"):
        sl.train(tiny(steps=10, lr=1e-3), out=out, resume=True)
    assert sl.train(tiny(steps=20), out=out, resume=True).metric_rows()[-1]["step"] == 20
    assert not (out / rundir.LOCK).exists()  # the run directory's layout is unchanged


def test_missing_and_corrupt_checkpoints_are_named(tmp_path):
    run = sl.train(tiny(steps=20), out=tmp_path / "r")
    with pytest.raises(sl.SelectorLensError, match=r"no checkpoint at step 15 .*nearest: 0, 20"):
        run.model_at(15)
    path = run.ckpt_path(20)
    blob = bytearray(path.read_bytes())
    blob[-20:] = b"\x00" * 20  # flip weight bytes: the checksum catches it
    path.write_bytes(bytes(blob))
    with pytest.raises(
        sl.SelectorLensError, match=r"corrupt checkpoint: .*step_000020.safetensors \(checksum"
    ):
        run.model_at(20)
    path.write_bytes(b"not a safetensors file")
    with pytest.raises(
        sl.SelectorLensError, match=r"corrupt checkpoint: .*step_000020.safetensors"
    ):
        run.model_at(20)
    run.state_path.write_bytes(b"torn")
    with pytest.raises(sl.SelectorLensError, match=r"corrupt checkpoint: .*last.pt"):
        sl.train(tiny(steps=40), out=tmp_path / "r", resume=True)


def test_torn_last_metrics_line_is_skipped_but_corruption_is_named(tmp_path):
    run = sl.train(tiny(steps=10), out=tmp_path / "r")
    path = run.path / "metrics.jsonl"
    path.write_text(path.read_text() + '{"step": 20, "lo')
    assert [r["step"] for r in run.metric_rows()] == [0, 10]
    path.write_text('{"step": 0\n' + path.read_text())
    with pytest.raises(sl.SelectorLensError, match="corrupt file: .*metrics.jsonl"):
        run.metric_rows()
    with pytest.raises(sl.SelectorLensError, match="not a run directory"):
        sl.Run.open(tmp_path / "nothing")


def test_ctrl_c_saves_the_state_where_it_stopped_and_resume_is_exact(tmp_path):
    import signal
    import time

    from tests.helpers import SMALL_RUN, logged, train_process

    args = [*SMALL_RUN, "--steps", "400", "--eval-every", "10", "--ckpt-every", "100"]
    args += ["--no-early-stop", "--json"]

    def train(out, *more):
        return train_process(*args, "--out", out, *more, stdout=subprocess.PIPE)

    ref = train(tmp_path / "ref")
    assert ref.wait(timeout=300) == 0
    proc, log = train(tmp_path / "r"), tmp_path / "r" / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and (not log.is_file() or log.read_text().count("\n") < 5):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    run = sl.Run.open(tmp_path / "r")
    stopped = run.steps[-1]
    import torch

    assert run.status == "interrupted" and stopped > 0
    assert torch.load(run.state_path, weights_only=True)["step"] == stopped  # where it stopped
    assert f"its state at step {stopped} is saved" in err and "--resume" in err
    again = train(tmp_path / "r", "--resume")
    assert again.wait(timeout=300) == 0
    done, want = sl.Run.open(tmp_path / "r"), sl.Run.open(tmp_path / "ref")
    assert logged(done) == logged(want)
    assert done.status == "finished"
