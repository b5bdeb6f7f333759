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


def test_cli_module_imports_no_torch():
    """--help stays instant because nothing heavy loads before a command runs."""
    code = "import sys; import selector_lens.cli; print('torch' in sys.modules, 'transformer_lens' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "checkpoints" / "r"
    out = cli("train", *TINY, "--steps", "60", "--lr", "0.003", "--no-early-stop", "--out", str(path), "--json")
    assert out.returncode == 0, out.stderr
    return path


def test_ablate_head_json_and_alias(tiny_run):
    alias = [sys.executable, "-c", "from selector_lens.cli import ablate_head_main; ablate_head_main()"]
    out = subprocess.run([*alias, "--layer", "0", "--head", "1", "--mode", "zero", "--step", "60", "--json"],
                         capture_output=True, text=True, cwd=tiny_run.parent.parent)  # latest run under checkpoints/
    assert out.returncode == 0, out.stderr
    rec = json.loads(out.stdout)
    assert (rec["step"], rec["layer"], rec["head"], rec["mode"]) == (60, 0, 1, "zero")
    assert rec["delta"]["loss"] == pytest.approx(rec["ablated"]["loss"] - rec["clean"]["loss"])
    every = cli("ablate-head", "--run", str(tiny_run), "--all-heads", "--every", "3", "--json")
    recs = json.loads(every.stdout)
    assert len(recs) == 3 * 2 and {r["step"] for r in recs} == {0, 30, 60}  # 7 checkpoints, every 3rd
    bad = cli("ablate-head", "--run", str(tiny_run), "--layer", "0", "--head", "2", "--step", "60")
    assert bad.returncode == 2 and "head 2 out of range: the model has heads 0..1" in bad.stderr
    bad = cli("ablate-head", "--run", str(tiny_run), "--layer", "1", "--head", "0", "--step", "60")
    assert bad.returncode == 2 and "layer 1 out of range: the model has layers 0..0" in bad.stderr
    for args in (["--layer", "0"], ["--all-heads", "--head", "1"]):
        bad = cli("ablate-head", "--run", str(tiny_run), *args, "--step", "60")
        assert bad.returncode == 2 and "give --layer and --head, or --all-heads" in bad.stderr
    bad = cli("ablate-head", "--run", str(tiny_run), "--layer", "0", "--head", "0", "--step", "35")
    assert bad.returncode == 2 and "no checkpoint at step 35" in bad.stderr


def test_attention_patch_cascade_json(tiny_run):
    att = json.loads(cli("attention", "--run", str(tiny_run), "--json").stdout)
    assert len(att) == 13 * 1 * 2 and {"step", "layer", "head", "attn_to_z"} <= set(att[0])
    pat = json.loads(cli("patch", "--run", str(tiny_run), "--site", "resid_pre", "--step", "60", "--json").stdout)
    assert len(pat) == 1 * 16 and all(r["step"] == 60 for r in pat)
    casc = cli("cascade", "--run", str(tiny_run), "--json")
    assert casc.returncode == 0, casc.stderr
    assert json.loads(casc.stdout)["routing_head"] in {"L0H0", "L0H1"}


def test_landscape_json_and_bad_sample(tiny_run):
    out = cli("landscape", "--run", str(tiny_run), "--step", "60", "--sample", "16", "--power-iters", "5",
              "--lanczos-iters", "5", "--top-k", "2", "--noise-batches", "2", "--json")
    assert out.returncode == 0, out.stderr
    (rec,) = json.loads(out.stdout)
    assert rec["step"] == 60 and rec["sample"] == 16 and rec["top_k"] == 2 and rec["lambda_max"] > 0
    bad = cli("landscape", "--run", str(tiny_run), "--step", "60", "--sample", "0")
    assert bad.returncode == 2 and "sample size must be >= 1" in bad.stderr


def test_empty_and_missing_runs(tmp_path):
    missing = cli("ablate-head", "--run", str(tmp_path / "nope"), "--layer", "0", "--head", "0")
    assert missing.returncode == 2 and "not a run directory" in missing.stderr
    none = cli("attention", cwd=tmp_path)
    assert none.returncode == 2 and "no run found under checkpoints/" in none.stderr


def test_dashboard_command(tiny_run, tmp_path):
    out = cli("dashboard", "--run", str(tiny_run), "-o", str(tmp_path / "d.html"), "--no-ablation",
              "--patch-steps", "0", "--explorer-steps", "2")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "d.html").stat().st_size > 1e6 and "wrote" in out.stdout
    bad = cli("dashboard", "--run", str(tiny_run), "-o", str(tmp_path / "e.html"), "--example", "999")
    assert bad.returncode == 2 and "example 999 out of range" in bad.stderr


def test_sweep_and_fit_commands(tmp_path):
    grid = ["--grid", "k=3", "--grid", "n_bases=6,12", "--grid", "steps=40", "--grid", "n_layers=1",
            "--grid", "d_model=32", "--grid", "d_head=16", "--grid", "d_mlp=64", "--grid", "batch_size=16",
            "--grid", "lr=3e-3", "--grid", "eval_every=10", "--grid", "ckpt_every=20"]
    out = cli("sweep", *grid, "--out", str(tmp_path / "s"), "--workers", "2", "--json")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert sorted(r["outcome"] for r in res["results"]) == ["done", "done"]
    fit = cli("fit", str(tmp_path / "s"), "--json")
    assert fit.returncode == 0, fit.stderr
    body = json.loads(fit.stdout)
    assert len(body["runs"]) == 2 and (tmp_path / "s" / "fit.json").is_file()
    assert (body["fits"]["tau_vs_D"] is None) == (sum(r["tau"] is not None for r in body["runs"]) < 2)
    bad = cli("sweep", "--grid", "k=0,3", "--out", str(tmp_path / "t"))
    assert bad.returncode == 2 and "k must be >= 1" in bad.stderr
    none = cli("fit", str(tmp_path / "empty"))
    assert none.returncode == 2 and "no run found" in none.stderr
