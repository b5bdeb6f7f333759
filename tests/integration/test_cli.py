import json
import subprocess
import sys
from dataclasses import fields

import pytest
import typer

import selector_lens as sl
from selector_lens.cli import app
from tests.helpers import SMALL_RUN, cli, cli_process, logged

TINY = [
    "--k",
    "3",
    "--n-bases",
    "8",
    "--n-layers",
    "1",
    "--n-heads",
    "2",
    "--d-model",
    "32",
    "--d-head",
    "16",
    "--d-mlp",
    "64",
    "--eval-every",
    "5",
    "--ckpt-every",
    "10",
    "--batch-size",
    "8",
]


COMMANDS = [
    "train",
    "ablate-head",
    "attention",
    "logit-lens",
    "weights",
    "cascade",
    "patch",
    "landscape",
    "dashboard",
    "sweep",
    "fit",
    "reproduce",
    "import",
    "publish",
    "prune",
    "analyze",
    "study",
    "representations",
]


def test_help_lists_commands_and_each_has_examples():
    out = cli("--help")
    assert out.returncode == 0 and all(c in out.stdout for c in COMMANDS)
    for command in COMMANDS:
        page = cli(command, "--help").stdout
        assert "Examples:" in page and f"{command} " in page.split("Examples:")[1], command
    assert "--resume" in cli("train", "--help").stdout


def test_every_config_field_is_a_train_option():
    """One source for options: each field of the three configs is a `train` option (the task's seed
    as --data-seed), with the dataclass's default."""
    params = {p.name: p for p in typer.main.get_command(app).commands["train"].params}
    for cls in (sl.SelectorTask, sl.ModelConfig, sl.TrainConfig):
        for f in fields(cls):
            if f.name in ("task", "model"):
                continue
            name = "data_seed" if (cls, f.name) == (sl.SelectorTask, "seed") else f.name
            assert name in params, f"{cls.__name__}.{f.name} has no train option"
            assert params[name].default == (None if name == "data_seed" else f.default), name
            assert params[name].help, name


def test_train_sets_every_option(monkeypatch, tmp_path):
    """Every option reaches the config the trainer gets (non-default values, one run of the CLI)."""
    from selector_lens.training import trainer

    values = dict(
        k=4,
        n_bases=9,
        b_length=5,
        a_length=3,
        z_length=3,
        direction="a_to_b",
        unique_first_char=False,
        data_seed=5,
        z_groups=3,
        parity="ours",
        n_layers=1,
        n_heads=3,
        d_model=24,
        d_head=8,
        d_mlp=40,
        act_fn="relu",
        normalization_type="none",
        n_ctx=20,
        attn_only=True,
        positional_embedding_type="shortformer",
        steps=7,
        batch_size=5,
        lr=0.02,
        weight_decay=0.1,
        optimizer="sgd",
        momentum=0.5,
        beta1=0.8,
        beta2=0.95,
        grad_clip=0.5,
        schedule="cosine",
        warmup_steps=2,
        cosine_steps=6,
        eval_every=3,
        eval_cadence="dense",
        ckpt_every=4,
        state_every=8,
        compile=True,
        eval_groups="all",
        early_stop=False,
        early_stop_frac=0.2,
        early_stop_evals=2,
        early_stop_acc=0.9,
        seed=9,
        device="auto",
        task="selector",
    )
    # every option of the selector's (another task's options are its own: test_protocol.py)
    assert set(values) == {
        n for n, o in sl.config.OPTIONS.items() if not o.tasks or "selector" in o.tasks
    }
    args = []
    for name, v in values.items():
        flag = "--" + name.replace("_", "-")
        args += [flag if v is True else "--no-" + flag[2:]] if isinstance(v, bool) else [flag, v]
    seen = {}

    def record(cfg, **kw):
        seen["cfg"] = cfg
        raise sl.SelectorLensError("recorded")

    monkeypatch.setattr(trainer, "train", record)
    assert cli("train", *args, "--out", tmp_path / "r").returncode == 2
    cfg = seen["cfg"]
    flat = {
        **{f.name: getattr(cfg.task, f.name) for f in fields(cfg.task)},
        **{f.name: getattr(cfg.model, f.name) for f in fields(cfg.model)},
        **{f.name: getattr(cfg, f.name) for f in fields(cfg) if f.name not in ("task", "model")},
    }
    flat["data_seed"], flat["seed"], flat["task"] = cfg.task.seed, cfg.seed, cfg.task.name
    assert flat == {**values, "normalization_type": None}


@pytest.mark.parametrize(
    "args,words",
    [
        (["--k", "0"], "k must be >= 1"),
        (["--k", "37"], "k=37 > 36"),
        (["--lr", "-1"], "lr must be positive"),
        (["--batch-size", "0"], "batch_size"),
        (["--steps", "0"], "steps"),
        (["--direction", "up"], "unknown direction"),
        (["--n-bases", "3000000000"], "n_bases=3000000000 exceeds"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, words):
    out = cli("train", *args)
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0 and words in out.stderr


def test_the_console_script_exits_2_with_one_line():
    out = cli_process("train", "--k", "37")
    assert (
        out.returncode == 2
        and out.stderr
        == "error: k=37 > 36: with unique_first_char the K targets of a "
        "base need K different first characters (turn unique_first_char off for larger K)\n"
    )


def test_train_json_summary_then_refuse_to_overwrite(tmp_path):
    out = cli("train", *TINY, "--steps", "20", "--out", str(tmp_path / "r"), "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["final_step"] == 20 and summary["status"] == "finished"
    assert 0 <= summary["final_candidate_acc"] <= 1
    again = cli("train", *TINY, "--lr", "0.01", "--steps", "20", "--out", str(tmp_path / "r"))
    assert again.returncode == 2 and "holds a different run" in again.stderr


def test_every_api_name_is_what_it_says_after_every_module_is_loaded():
    """A lazily exported name must not be shadowed by a submodule of the same name once that
    module is imported (as happened to `sl.logit_lens`)."""
    import importlib
    import pkgutil
    import types

    for m in pkgutil.walk_packages(sl.__path__, "selector_lens."):
        if not m.name.endswith("__main__"):
            importlib.import_module(m.name)
    for name in sl.__all__:
        assert not isinstance(getattr(sl, name), types.ModuleType), name


def test_cli_module_imports_no_torch():
    """--help stays instant because nothing heavy loads before a command runs."""
    code = "import sys; import selector_lens.cli; print('torch' in sys.modules, 'transformer_lens' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.split() == ["False", "False"]


def test_stored_dashboard_imports_no_torch(tmp_path):
    """A dashboard drawn from stored tables (the published K = 10 run) is JSON and plotly: torch
    (a second to import) loads only where a table must be computed (`selector_lens.lazy`)."""
    run = "analyses/results/paper/runs/k10-nb1000-s42"
    code = (
        "import sys, runpy\n"
        f"sys.argv = ['selector-lens', 'dashboard', '--run', {run!r}, '-o', {str(tmp_path / 'd.html')!r}]\n"
        "try:\n    runpy.run_module('selector_lens', run_name='__main__')\n"
        "except SystemExit as e:\n    assert not e.code, e.code\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "False"
    assert (tmp_path / "d.html").stat().st_size > 1_000_000  # every figure drawn


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "checkpoints" / "r"
    out = cli(
        "train",
        *TINY,
        "--steps",
        "60",
        "--lr",
        "0.003",
        "--no-early-stop",
        "--out",
        str(path),
        "--json",
    )
    assert out.returncode == 0, out.stderr
    stored = json.loads(out.stdout)["analyze_s"]  # train (--analyze by default) filled the store
    assert {"patching", "logit_lens", "explorer"} <= set(stored)
    assert (path / "analyses" / "patching").is_dir()
    return path


def test_the_answers_are_ready_when_training_ends(tiny_run, tmp_path):
    """After `train`, the routing head is read from the store (TransformerLens never imported)
    and equals a fresh computation; `--no-analyze` stores nothing."""
    code = (
        "import sys, json; import selector_lens as sl\n"
        f"out = sl.find_routing_head(sl.Run.open({str(tiny_run)!r}))\n"
        "print(json.dumps([out['label'], out['delta_candidate_loss'], out['best_sufficient_head'], "
        "'transformer_lens' in sys.modules, 'torch' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    label, delta, alone, tl, torch_loaded = json.loads(out.stdout)
    assert not tl and not torch_loaded
    from selector_lens.analysis.ablation import ablate_each_head

    run = sl.Run.open(tiny_run)
    post = run.phases()["post"]
    fresh = ablate_each_head(run, [post], recompute=True)
    best = fresh.loc[fresh.delta_candidate_loss.idxmax()]
    assert label == f"L{best['layer']}H{best['head']}" and delta == best.delta_candidate_loss
    bare = tmp_path / "bare"
    out = cli("train", *TINY, "--steps", "20", "--no-analyze", "--out", str(bare), "--json")
    assert out.returncode == 0 and "analyze_s" not in json.loads(out.stdout)
    assert not (bare / "analyses").exists()


def test_an_analysis_killed_after_training_is_completed_by_resume(tmp_path, monkeypatch):
    """Killed while storing its analyses, a trained run keeps what was stored; `train --resume`
    completes the rest without computing again what is there."""
    from selector_lens.analysis import lens

    path = tmp_path / "r"

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(lens, "logit_lens", killed)  # after patching, before the explorer
        out = cli("train", *TINY, "--steps", "40", "--no-early-stop", "--out", str(path))
    assert out.returncode != 0 and sl.Run.open(path).status == "finished"
    store = path / "analyses"
    assert (store / "patching").is_dir() and not (store / "attention_explorer").exists()
    kept = {p: p.stat().st_ino for p in (store / "patching").rglob("*.json")}
    out = cli("train", "--out", str(path), "--resume", "--json")
    assert out.returncode == 0, out.stderr
    assert (store / "logit_lens").is_dir() and (store / "attention_explorer").is_dir()
    assert kept and {p: p.stat().st_ino for p in kept} == kept  # read back, not written again


@pytest.mark.slow
def test_ablate_head_json_and_alias(tiny_run):
    alias = [
        sys.executable,
        "-c",
        "from selector_lens.cli import ablate_head_main; ablate_head_main()",
    ]  # the script
    out = subprocess.run(
        [*alias, "--layer", "0", "--head", "1", "--mode", "zero", "--step", "60", "--json"],
        capture_output=True,
        text=True,
        cwd=tiny_run.parent.parent,
    )  # latest run under checkpoints/
    assert out.returncode == 0, out.stderr
    rec = json.loads(out.stdout)
    assert (rec["step"], rec["layer"], rec["head"], rec["mode"]) == (60, 0, 1, "zero")
    assert rec["delta"]["loss"] == pytest.approx(rec["ablated"]["loss"] - rec["clean"]["loss"])
    every = cli("ablate-head", "--run", str(tiny_run), "--all-heads", "--every", "3", "--json")
    recs = json.loads(every.stdout)
    assert len(recs) == 3 * 2 and {r["step"] for r in recs} == {
        0,
        30,
        60,
    }  # 7 checkpoints, every 3rd
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
    pat = json.loads(
        cli("patch", "--run", str(tiny_run), "--site", "resid_pre", "--step", "60", "--json").stdout
    )
    assert len(pat) == 1 * 16 and all(r["step"] == 60 for r in pat)
    casc = cli("cascade", "--run", str(tiny_run), "--json")
    assert casc.returncode == 0, casc.stderr
    assert json.loads(casc.stdout)["routing_head"] in {"L0H0", "L0H1"}


def test_landscape_json_and_bad_sample(tiny_run):
    out = cli(
        "landscape",
        "--run",
        str(tiny_run),
        "--step",
        "60",
        "--sample",
        "16",
        "--power-iters",
        "5",
        "--lanczos-iters",
        "5",
        "--top-k",
        "2",
        "--noise-batches",
        "2",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    (rec,) = json.loads(out.stdout)
    assert rec["step"] == 60 and rec["sample"] == 16 and rec["top_k"] == 2 and rec["lambda_max"] > 0
    bad = cli("landscape", "--run", str(tiny_run), "--step", "60", "--sample", "0")
    assert bad.returncode == 2 and "sample size must be >= 1" in bad.stderr
    args = ["landscape", "--run", str(tiny_run), "--step", "60", "--sample", "16"]
    paper = cli(*args, "--estimator", "shifted-power", "--json")
    assert paper.returncode == 0, paper.stderr
    (rec,) = json.loads(paper.stdout)
    assert rec["estimator"] == "shifted-power" and rec["iters_min"] == len(
        rec["lambda_min_by_iter"]
    )
    assert rec["lambda_min"] == rec["lambda_min_by_iter"][-1] and rec["hvps"] >= 12
    assert cli(*args, "--estimator", "shifted-power").returncode == 0  # its own table
    wrong = cli(*args, "--estimator", "arnoldi")
    assert wrong.returncode == 2 and "unknown estimator 'arnoldi'" in wrong.stderr


def test_empty_and_missing_runs(tmp_path):
    missing = cli("ablate-head", "--run", str(tmp_path / "nope"), "--layer", "0", "--head", "0")
    assert missing.returncode == 2 and "not a run directory" in missing.stderr
    none = cli("attention", cwd=tmp_path)
    assert none.returncode == 2 and "no run found under checkpoints/" in none.stderr


def test_dashboard_command(tiny_run, tmp_path):
    out = cli(
        "dashboard",
        "--run",
        str(tiny_run),
        "-o",
        str(tmp_path / "d.html"),
        "--no-ablation",
        "--patch-steps",
        "0",
        "--explorer-steps",
        "2",
    )
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "d.html").stat().st_size > 1e6 and "wrote" in out.stdout
    bad = cli(
        "dashboard", "--run", str(tiny_run), "-o", str(tmp_path / "e.html"), "--example", "999"
    )
    assert bad.returncode == 2 and "example 999 out of range" in bad.stderr


@pytest.mark.slow
def test_sweep_and_fit_commands(tmp_path):
    grid = [
        "--grid",
        "k=3",
        "--grid",
        "n_bases=6,12",
        "--grid",
        "steps=40",
        "--grid",
        "n_layers=1",
        "--grid",
        "d_model=32",
        "--grid",
        "d_head=16",
        "--grid",
        "d_mlp=64",
        "--grid",
        "batch_size=16",
        "--grid",
        "lr=3e-3",
        "--grid",
        "eval_every=10",
        "--grid",
        "ckpt_every=20",
    ]
    out = cli("sweep", *grid, "--out", str(tmp_path / "s"), "--workers", "2", "--json")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert sorted(r["outcome"] for r in res["results"]) == ["done", "done"]
    fit = cli("fit", str(tmp_path / "s"), "--json", "-o", str(tmp_path / "fit.json"))
    assert fit.returncode == 0, fit.stderr
    body = json.loads(fit.stdout)
    assert len(body["runs"]) == 2 and (tmp_path / "fit.json").is_file()
    assert not (tmp_path / "s" / "fit.json").exists()  # never into the folder it reads
    (group,) = body["groups"]
    assert (group["fits"]["tau_vs_D"] is None) == (
        sum(r["tau"] is not None for r in body["runs"]) < 2
    )
    bad = cli("sweep", "--grid", "k=0,3", "--out", str(tmp_path / "t"))
    assert bad.returncode == 2 and "k must be >= 1" in bad.stderr
    none = cli("fit", str(tmp_path / "empty"))
    assert none.returncode == 2 and "no run found" in none.stderr


def test_resume_reads_the_runs_options_refuses_others_and_extends_on_purpose(tmp_path):
    args = [*SMALL_RUN, "--steps", "20", "--eval-every", "10"]
    assert cli("train", *args, "--out", tmp_path / "r", "--json").returncode == 0
    raised = cli("train", "--out", tmp_path / "r", "--resume", "--steps", "40")
    assert raised.returncode == 2
    assert (
        "--steps 40 differs from the run's 20 (run.json): raise it with --extend-to N"
        in raised.stderr
    )
    other = cli("train", "--out", tmp_path / "r", "--resume", "--lr", "0.01")
    assert other.returncode == 2 and "--lr 0.01 differs from the run's 0.001" in other.stderr
    back = cli("train", "--out", tmp_path / "r", "--resume", "--extend-to", "10")
    assert back.returncode == 2 and "already trained to step 20" in back.stderr
    assert cli("train", "--out", tmp_path / "r", "--extend-to", "40").returncode == 2
    same = [*args, "--out", tmp_path / "r", "--resume", "--extend-to", "40", "--json"]
    out = cli("train", *same)  # repeating the run's own options is fine
    assert out.returncode == 0, out.stderr
    run = sl.Run.open(tmp_path / "r")
    assert (run.config.steps, run.config.model.n_layers, run.config.task.k) == (40, 1, 3)
    assert [r["step"] for r in run.metric_rows()] == [0, 10, 20, 30, 40]


def test_extending_a_run_that_stopped_early_trains_on_as_if_it_never_stopped(tmp_path):
    """`--extend-to` past an early stop continues exactly: the same evaluations as one run
    trained to that budget with no early stop (one thread, in process)."""
    args = [*SMALL_RUN, "--lr", "3e-3", "--eval-every", "10", "--early-stop-evals", "2"]
    assert cli("train", *args, "--steps", "400", "--out", tmp_path / "r").returncode == 0
    stopped = sl.Run.open(tmp_path / "r")
    assert stopped.info["status"] == "early_stopped" and stopped.steps[-1] < 400
    end = stopped.steps[-1] + 40
    out = cli("train", "--out", tmp_path / "r", "--resume", "--extend-to", end)
    assert out.returncode == 0, out.stderr
    whole = [*args, "--steps", end, "--no-early-stop", "--out", tmp_path / "whole"]
    assert cli("train", *whole).returncode == 0
    extended = sl.Run.open(tmp_path / "r")
    assert extended.steps[-1] == end and not extended.config.early_stop
    assert logged(extended) == logged(sl.Run.open(tmp_path / "whole"))


def test_training_without_a_terminal_prints_plain_progress_lines(tmp_path):
    out = cli_process("train", *SMALL_RUN, "--steps", "40", "--out", tmp_path)
    assert out.returncode == 0, out.stderr
    lines = [x for x in out.stderr.splitlines() if x.startswith("train: step")]
    assert lines[-1].startswith("train: step 40/40  loss ") and len(lines) >= 4


def test_version():
    out = cli_process("--version")
    assert (out.returncode, out.stdout) == (0, f"selector-lens {sl.__version__}\n")


def test_table_numbers_keep_small_values_and_one_missing_symbol():
    from selector_lens.cli.format import MISSING, number

    assert number(3e-4) == "0.0003" and number(1.2e-5) == "1.2e-05"
    assert number(0.5) == "0.500" and number(0.0) == "0.000" and number(123456.0) == "1.23e+05"
    assert number(None) == number(float("nan")) == MISSING
    assert number(7) == "7" and number("L0H3") == "L0H3"


def test_the_ablation_table_sorts_marks_and_says_its_units(tiny_run, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # one table row per line
    out = cli("ablate-head", "--run", str(tiny_run), "--all-heads", "--step", "60")
    assert out.returncode == 0, out.stderr
    assert "losses in nats" in out.stdout and "log K 1.099" in out.stdout
    lines = [line for line in out.stdout.splitlines() if "L0H" in line or "L1H" in line]
    assert "◀ top" in lines[0] and sum("◀ top" in line for line in lines) == 1
    deltas = [float(line.split("│")[6]) for line in lines]
    assert deltas == sorted(deltas, reverse=True)  # the most damaging head first
    lens = cli("logit-lens", "--run", str(tiny_run))
    assert lens.returncode == 0 and "--all for each" not in lens.stdout  # few steps: all shown
