"""`train --log tensorboard|wandb`: what the trackers hold is metrics.jsonl, read back from
their own files (TensorBoard's event reader; the W&B offline run's records, parsed here)."""

import json
from pathlib import Path

import pytest

import selector_lens as sl
from selector_lens.training.trackers import scalars
from tests.helpers import SMALL_RUN, cli, tiny


def test_scalars_flattens_a_row():
    row = {"step": 10, "loss": 1.5, "dz": None, "attn_to_z": [[0.1, 0.2]], "group_correct": [1]}
    assert scalars(row) == {"loss": 1.5, "attn_to_z/L0H0": 0.1, "attn_to_z/L0H1": 0.2}


def test_tensorboard_holds_every_evaluation(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = sl.train(tiny(), out=tmp_path / "r", log="tensorboard")
    acc = EventAccumulator(str(run.path / "tensorboard"))
    acc.Reload()
    rows = run.metric_rows()
    for name in ("loss", "candidate_loss", "dz", "attn_to_z/L1H0"):
        logged = {e.step: e.value for e in acc.Scalars(name)}
        assert logged == pytest.approx({r["step"]: scalars(r)[name] for r in rows}, rel=1e-6)


def wandb_history(path: Path) -> list[dict]:
    """The history records of a W&B offline run file: a ':W&B' header, then LevelDB-log
    records (7-byte headers in 32 KiB blocks) of wandb's Record protobufs."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, records, parts = 7, 32768, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 1:
            records.append(chunk)
        elif kind == 2:
            parts = chunk
        elif kind == 3:
            parts += chunk
        elif kind == 4:
            records.append(parts + chunk)
    history = []
    for raw in records:
        rec = pb.Record()
        rec.ParseFromString(raw)
        if rec.WhichOneof("record_type") == "history":
            items = rec.history.item
            history.append(
                {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items}
            )
    return history


def test_wandb_offline_holds_every_evaluation_and_sends_nothing(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    args = [*SMALL_RUN, "--steps", "30", "--eval-every", "10", "--log", "wandb"]
    out = cli("train", *args, "--out", tmp_path / "r", "--json")
    assert out.returncode == 0, out.stderr
    run = sl.Run.open(tmp_path / "r")
    (file,) = (run.path / "wandb").glob("offline-run-*/run-*.wandb")  # offline: a file, no sync
    logged = {h["_step"]: h for h in wandb_history(file)}
    rows = run.metric_rows()
    assert sorted(logged) == [r["step"] for r in rows]
    for r in rows:
        for name, value in scalars(r).items():
            assert logged[r["step"]][name] == pytest.approx(value, rel=1e-6), name


def test_an_unknown_tracker_is_one_line(tmp_path):
    out = cli("train", *SMALL_RUN, "--steps", "2", "--log", "mlflow", "--out", tmp_path / "r")
    assert out.returncode == 2 and "unknown tracker 'mlflow'" in out.stderr
    assert not (tmp_path / "r").exists()  # refused before anything was written
