import json
import subprocess
import sys

import pytest

TINY = ["--k", "3", "--n-bases", "8", "--n-layers", "1", "--n-heads", "2", "--d-model", "32",
        "--d-head", "16", "--d-mlp", "64", "--eval-every", "5", "--ckpt-every", "10", "--batch-size", "8"]


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "selector_lens", *args], capture_output=True, text=True, cwd=cwd)


def test_help_lists_commands_and_examples():
    out = cli("--help")
    assert out.returncode == 0 and "train" in out.stdout
    assert "--resume" in cli("train", "--help").stdout


@pytest.mark.parametrize(
    "args,words",
    [(["--k", "0"], "k must be >= 1"), (["--k", "37"], "k=37 > 36"), (["--lr", "-1"], "lr must be positive"),
     (["--batch-size", "0"], "batch_size"), (["--steps", "0"], "steps"), (["--direction", "up"], "unknown direction"),
     (["--n-bases", "3000000000"], "n_bases=3000000000 exceeds")],
)
def test_bad_input_is_one_line_and_exit_2(args, words):
    out = cli("train", *args)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and words in out.stderr and "Traceback" not in out.stderr


def test_train_json_summary_then_refuse_to_overwrite(tmp_path):
    out = cli("train", *TINY, "--steps", "20", "--out", str(tmp_path / "r"), "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["final_step"] == 20 and summary["status"] == "finished"
    assert 0 <= summary["final_candidate_acc"] <= 1
    again = cli("train", *TINY, "--lr", "0.01", "--steps", "20", "--out", str(tmp_path / "r"))
    assert again.returncode == 2 and "holds a different run" in again.stderr
