"""`selector-lens import`: a run of the paper's own code as a selector-lens run directory.

A synass-lens output folder holds `config.yaml` and `checkpoints/step_NNNNNN/model.pt` (a
HookedTransformer state dict, with `metadata.json`), often `training_history.json`. We map its
config onto ours with parity "paper" (`task.paper`), regenerate the dataset and check it against
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


_REQUIRED = object()


class _Fields:
    """Reads config.yaml's fields, collecting every bad one, so the error names them all."""

    def __init__(self, raw):
        self.raw, self.bad = raw if isinstance(raw, dict) else {}, []
        if not isinstance(raw, dict):
            self.bad.append("config.yaml is not a mapping")

    def __call__(self, dotted: str, kind, default=_REQUIRED):
        from selector_lens.fields import checked

        node = self.raw
        for key in dotted.split("."):
            if not isinstance(node, dict) or key not in node or node[key] is None:
                if default is _REQUIRED:
                    self.bad.append(f"{dotted} is missing")
                return None if default is _REQUIRED else default
            node = node[key]
        if isinstance(node, str) and kind in (int, float):  # YAML reads 1e-3 as a string
            try:
                node = float(node)
            except ValueError:
                pass
        try:
            return checked(dotted, node, kind)
        except SelectorLensError as e:
            self.bad.append(str(e))
            return default if default is not _REQUIRED else None

    def check(self) -> None:
        if self.bad:
            raise SelectorLensError(f"config.yaml: {'; '.join(self.bad)}")


def config_from_paper(raw: dict):
    """Our TrainConfig (parity "paper") for a synass-lens config; one clear error naming every
    field that is missing, of the wrong type, or one we cannot reproduce."""
    from selector_lens.config import ModelConfig, TrainConfig
    from selector_lens.task.selector import SelectorTask

    get = _Fields(raw)
    if get("data.vocab_chars", str, ALPHABET) != ALPHABET:
        get.bad.append(f"data.vocab_chars must be {ALPHABET!r} to be regenerated")
    if get("data.probe_fraction", float, 0.0) != 0.0 or not get("data.split_by_base", bool, False):
        get.bad.append(
            "only runs with data.split_by_base true and probe_fraction 0 can be regenerated"
        )
    schedule = get("training.scheduler", str, "constant")
    if schedule not in ("constant", "cosine"):
        get.bad.append(
            f"training.scheduler {schedule!r} is not one parity reproduces (constant or cosine)"
        )
    seed = get("experiment.seed", int)
    task = dict(
        k=get("data.k", int),
        n_bases=get("data.n_unique_b", int),
        b_length=get("data.b_length", int, 6),
        a_length=get("data.a_length", int, 4),
        z_length=get("data.z_length", int, 2),
        direction=get("data.task", str, "bz_to_a"),
        unique_first_char=get("data.enforce_unique_a_first_char_per_b", bool, False),
    )
    d_model, n_heads = get("model.d_model", int, 128), get("model.n_heads", int, 4)
    model = dict(
        n_layers=get("model.n_layers", int, 4),
        n_heads=n_heads,
        d_model=d_model,
        d_head=get("model.d_head", int, None) or (d_model or 0) // max(n_heads or 1, 1),
        d_mlp=get("model.d_mlp", int, None) or 4 * (d_model or 0),
        act_fn=get("model.act_fn", str, "gelu"),
    )
    every = get("training.checkpoint_every", int, 100)
    train = dict(
        steps=get("training.max_steps", int, 50_000),
        batch_size=get("training.batch_size", int, 128),
        lr=get("training.learning_rate", float, 1e-3),
        weight_decay=get("training.weight_decay", float, 0.01),
        schedule=schedule,
        warmup_steps=get("training.warmup_steps", int, 0),
        eval_every=every,
        ckpt_every=every,
        seed=seed,
    )
    get.check()
    return TrainConfig(
        task=SelectorTask(**task, seed=seed, parity="paper"), model=ModelConfig(**model), **train
    )


def _check_shapes(state: dict, cfg, path: Path) -> None:
    """The weights' shapes against the config's model, before a model is built from it (a
    config that says d_model 1e7 beside small weights is named, not allocated)."""
    m = cfg.model
    want = {
        "embed.W_E": (None, m.d_model),
        "blocks.0.attn.W_Q": (m.n_heads, m.d_model, m.d_head),
        "blocks.0.mlp.W_in": (m.d_model, m.d_mlp),
    }
    for name, shape in want.items():
        got = tuple(state[name].shape) if name in state else None
        if (
            got is None
            or len(got) != len(shape)
            or any(s is not None and g != s for g, s in zip(got, shape))
        ):
            raise SelectorLensError(
                f"{path} does not fit config.yaml's model: {name} is {got}, the config says {shape}"
            )
    layers = {int(k.split(".")[1]) for k in state if k.startswith("blocks.")}
    if len(layers) != m.n_layers:
        raise SelectorLensError(
            f"{path} has {len(layers)} blocks, config.yaml's model.n_layers says {m.n_layers}"
        )


def _read_history(path: Path) -> tuple[str, dict]:
    """The code's training_history.json: its text and {step: train loss}; one clear error when
    it is torn or not of that shape."""
    text = path.read_text()
    try:
        h = json.loads(text)
        steps, losses = h["steps"], h["train_loss"]
        if not all(isinstance(s, int) for s in steps) or not all(
            isinstance(v, (int, float)) for v in losses
        ):
            raise TypeError("steps must be integers and train_loss numbers")
        return text, dict(zip(steps, losses))
    except (ValueError, KeyError, TypeError) as e:
        raise SelectorLensError(
            f"{path} is not a training history ({type(e).__name__}: {e})"
        ) from None


def _read_examples(path: Path) -> list[dict]:
    out = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError as e:
                raise SelectorLensError(f"{path} line {i} is not JSON ({e})") from None
    return out


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
    """Turn a synass-lens output folder into a selector-lens run directory at `out`: all or
    nothing (built beside `out` and moved into place once complete)."""
    import shutil

    import yaml

    from selector_lens.runs import rundir

    folder, out = Path(folder), Path(out)
    t0 = time.perf_counter()
    if not (folder / "config.yaml").is_file():
        raise SelectorLensError(f"{folder} has no config.yaml (not a synass-lens output folder)")
    try:
        raw = yaml.safe_load((folder / "config.yaml").read_text()) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise SelectorLensError(f"{folder / 'config.yaml'} is not valid YAML ({e})") from None
    cfg = config_from_paper(raw)
    ckpts = _checkpoints(folder)
    rundir.require_free(out)  # before the dataset is regenerated and checked
    building = out.with_name(f".{out.name}.importing")
    shutil.rmtree(building, ignore_errors=True)  # what a killed import left
    try:
        _build(folder, building, cfg, ckpts, progress, t0)
        rundir.require_free(out)
        if out.exists():
            out.rmdir()
        building.rename(out)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    from selector_lens.runs.run import Run

    return Run.open(out)


def _build(folder: Path, out: Path, cfg, ckpts: dict, progress: bool, t0: float) -> None:
    from selector_lens.model.adapter import build_model, config_hash, save_weights
    from selector_lens.model.metrics import evaluate
    from selector_lens.runs import rundir
    from selector_lens.runs.run import Run
    from selector_lens.runs.transition import summarize
    from selector_lens.task.order import BatchOrder
    from selector_lens.training.trainer import lr_at

    first = read_paper_weights(ckpts[min(ckpts)])
    _check_shapes(first, cfg, ckpts[min(ckpts)])
    history_text, history = None, {}
    if (folder / "training_history.json").is_file():
        history_text, history = _read_history(folder / "training_history.json")
    data = cfg.task.generate()
    examples = folder / "examples.jsonl"
    if examples.is_file():
        theirs = _read_examples(examples)
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
    if history_text is not None:
        (out / "imported").mkdir(exist_ok=True)
        (out / "imported" / "training_history.json").write_text(history_text)
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
