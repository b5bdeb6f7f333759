"""`selector-lens import`: a run of the paper's own code as a selector-lens run directory.

A synass-lens output folder holds `config.yaml` and `checkpoints/step_NNNNNN/model.pt` (a
HookedTransformer state dict, with `metadata.json`), often `training_history.json`. We map its
config onto ours with parity "paper" (`parity.py`), regenerate the dataset and check it against
the folder's `examples.jsonl` when present, read every `model.pt` with
`torch.load(weights_only=True)` (a pickle that carries code is refused, never run) and write it as a
checksummed safetensors checkpoint, then evaluate every checkpoint with our metrics (candidate
loss, Δz, attention to z: the code logs none of them). The code's own history is kept beside
(`imported/training_history.json`) and its train loss is carried into the rows it matches.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from selector_lens import __version__
from selector_lens.errors import SelectorLensError
from selector_lens.task.vocab import ALPHABET

STEP_DIR = re.compile(r"step_(\d+)$")


def _need(cfg: dict, *keys):
    node = cfg
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            raise SelectorLensError(f"config.yaml has no {'.'.join(keys)}")
        node = node[key]
    return node


def config_from_paper(raw: dict):
    """Our TrainConfig (parity "paper") for a synass-lens config; one clear error for what we
    cannot reproduce."""
    from selector_lens.config import ModelConfig, TrainConfig
    from selector_lens.task.selector import SelectorTask

    data, model, training = _need(raw, "data"), _need(raw, "model"), _need(raw, "training")
    if data.get("vocab_chars", ALPHABET) != ALPHABET:
        raise SelectorLensError(
            f"config.yaml data.vocab_chars must be {ALPHABET!r} to be regenerated"
        )
    if float(data.get("probe_fraction", 0.0)) != 0.0 or not data.get("split_by_base", False):
        raise SelectorLensError(
            "only runs with data.split_by_base true and probe_fraction 0 can be regenerated"
        )
    schedule = str(training.get("scheduler", "constant"))
    if schedule not in ("constant", "cosine"):
        raise SelectorLensError(
            f"config.yaml training.scheduler {schedule!r} is not one parity reproduces "
            "(constant or cosine)"
        )
    seed = int(_need(raw, "experiment", "seed"))
    task = SelectorTask(
        k=int(_need(raw, "data", "k")),
        n_bases=int(_need(raw, "data", "n_unique_b")),
        b_length=int(data.get("b_length", 6)),
        a_length=int(data.get("a_length", 4)),
        z_length=int(data.get("z_length", 2)),
        direction=str(data.get("task", "bz_to_a")),
        unique_first_char=bool(data.get("enforce_unique_a_first_char_per_b", False)),
        seed=seed,
        parity="paper",
    )
    d_model, n_heads = int(model.get("d_model", 128)), int(model.get("n_heads", 4))
    mcfg = ModelConfig(
        n_layers=int(model.get("n_layers", 4)),
        n_heads=n_heads,
        d_model=d_model,
        d_head=int(model.get("d_head") or d_model // n_heads),
        d_mlp=int(model.get("d_mlp") or 4 * d_model),
        act_fn=str(model.get("act_fn", "gelu")),
    )
    return TrainConfig(
        task=task,
        model=mcfg,
        steps=int(training.get("max_steps", 50_000)),
        batch_size=int(training.get("batch_size", 128)),
        lr=float(training.get("learning_rate", 1e-3)),
        weight_decay=float(training.get("weight_decay", 0.01)),
        schedule=schedule,
        warmup_steps=int(training.get("warmup_steps", 0)),
        eval_every=int(training.get("checkpoint_every", 100)),
        ckpt_every=int(training.get("checkpoint_every", 100)),
        seed=seed,
    )


def _checkpoints(folder: Path) -> dict[int, Path]:
    ckpt = folder / "checkpoints"
    if not ckpt.is_dir():
        raise SelectorLensError(
            f"{folder} has no checkpoints/ folder (not a synass-lens output folder)"
        )
    found = {}
    for d in sorted(ckpt.iterdir()):
        m = STEP_DIR.match(d.name)
        if m and d.is_dir():
            if not (d / "model.pt").is_file():
                raise SelectorLensError(f"{d} has no model.pt")
            found[int(m.group(1))] = d / "model.pt"
    if not found:
        raise SelectorLensError(f"{ckpt} holds no step_NNNNNN/model.pt")
    return found


def read_paper_weights(path: Path) -> dict:
    """A synass-lens `model.pt` (state dict), unpickled with weights_only=True: data only."""
    import pickle

    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise SelectorLensError(
            f"{path} is not a plain weights file; refused to unpickle it "
            f"({str(e).splitlines()[0][:120]})"
        ) from None
    except Exception as e:
        raise SelectorLensError(f"unreadable weights file {path} ({type(e).__name__})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise SelectorLensError(f"{path} is not a state dict of tensors")
    return state


def import_run(folder, out, progress: bool = False):
    """Turn a synass-lens output folder into a selector-lens run directory at `out`."""
    import yaml

    from selector_lens.model.adapter import build_model, config_hash, save_weights
    from selector_lens.model.metrics import evaluate
    from selector_lens.runs import rundir
    from selector_lens.runs.run import Run
    from selector_lens.runs.transition import summarize
    from selector_lens.task.order import BatchOrder
    from selector_lens.training.trainer import lr_at

    folder, out = Path(folder), Path(out)
    t0 = time.perf_counter()
    if not (folder / "config.yaml").is_file():
        raise SelectorLensError(f"{folder} has no config.yaml (not a synass-lens output folder)")
    try:
        raw = yaml.safe_load((folder / "config.yaml").read_text()) or {}
    except yaml.YAMLError as e:
        raise SelectorLensError(f"{folder / 'config.yaml'} is not valid YAML ({e})") from None
    cfg = config_from_paper(raw)
    ckpts = _checkpoints(folder)
    rundir.require_free(out)  # before the dataset is regenerated and checked
    data = cfg.task.generate()
    examples = folder / "examples.jsonl"
    if examples.is_file():
        theirs = [json.loads(line) for line in examples.read_text().splitlines() if line.strip()]
        k = cfg.task.k
        ours = [
            {"b": data.bases[g], "z": data.selector(g, i), "a": data.targets[g][i]}
            for g in range(cfg.task.n_bases)
            for i in range(k)
        ]
        if theirs != ours:
            bad = (
                next(i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b)
                if len(theirs) == len(ours)
                else None
            )
            raise SelectorLensError(
                f"{examples} differs from the dataset regenerated from config.yaml"
                + (f" (first at example {bad})" if bad is not None else " (length)")
            )
    rundir.create(
        out, cfg.to_dict(), __version__, data.to_json(), imported_from=str(folder.resolve())
    )
    run = Run(out)
    model = build_model(cfg.model, cfg.task, cfg.seed)
    chash = config_hash(cfg.task, cfg.model)
    es = run.eval_set()
    rundir.update(out, eval_groups=es.groups.tolist())
    history = {}
    if (folder / "training_history.json").is_file():
        (out / "imported").mkdir(exist_ok=True)
        text = (folder / "training_history.json").read_text()
        (out / "imported" / "training_history.json").write_text(text)
        h = json.loads(text)
        history = {s: loss for s, loss in zip(h.get("steps", []), h.get("train_loss", []))}
    rows = []
    order = BatchOrder(cfg.task.n_examples, cfg.batch_size, cfg.seed)  # for examples_seen only
    steps = sorted(ckpts)
    if progress:
        from rich.progress import track

        steps = track(steps, description="importing checkpoints")
    for step in steps:
        state = read_paper_weights(ckpts[step])
        try:
            model.load_state_dict(state)
        except RuntimeError as e:
            raise SelectorLensError(
                f"{ckpts[step]} does not fit the config's model ({str(e).splitlines()[0]})"
            ) from None
        save_weights(model, run.ckpt_path(step), step, chash)
        model.eval()
        row = {
            "step": step,
            "examples_seen": order.examples_seen(step),
            "lr": lr_at(cfg, max(step, 1)),
            **evaluate(model, es),
        }
        if step in history:
            row["paper_train_loss"] = history[step]
        rows.append(row)
    (out / rundir.METRICS).write_text("".join(json.dumps(r) + "\n" for r in rows))
    rundir.finish(
        out, False, {**summarize(rows, cfg.task.log_k), "wall_time_s": time.perf_counter() - t0}
    )
    return run
