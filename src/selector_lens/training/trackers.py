"""Experiment trackers, optional: each evaluation row of `metrics.jsonl` mirrored to TensorBoard
or to Weights & Biases (offline: written into the run directory, sent nowhere unless the user
syncs it). `metrics.jsonl` stays the record; a tracker is a view of it.
"""

from __future__ import annotations

from selector_lens.errors import SelectorLensError

SKIPPED = ("step", "wall_s", "group_correct", "attn_to_z")  # the step is the x axis; lists apart


def scalars(row: dict) -> dict[str, float]:
    """A metrics row as flat scalars: every number, and attention to z per head
    (`attn_to_z/L0H3`); None values and the per-group counts are left out."""
    out = {k: float(v) for k, v in row.items() if k not in SKIPPED and isinstance(v, int | float)}
    for layer, heads in enumerate(row.get("attn_to_z") or []):
        for head, value in enumerate(heads):
            out[f"attn_to_z/L{layer}H{head}"] = float(value)
    return out


def _extra(module: str, extra: str):
    """`module` imported, or one line naming the extra (and `--log` value) that installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise SelectorLensError(
            f"--log {extra} needs {module}: pip install 'selector-lens[{extra}]'"
        ) from None


class TensorBoard:
    """Event files in `<run>/tensorboard/` (`tensorboard --logdir <run>`)."""

    def __init__(self, run, options: dict):
        board = _extra("torch.utils.tensorboard", "tensorboard")
        self.writer = board.SummaryWriter(log_dir=str(run.path / "tensorboard"))
        self.writer.add_text("options", repr(options))

    def write(self, row: dict) -> None:
        for name, value in scalars(row).items():
            self.writer.add_scalar(name, value, row["step"])
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandB:
    """An offline W&B run in `<run>/wandb/` (`wandb sync` sends it, if the user wants)."""

    def __init__(self, run, options: dict):
        self.run = _extra("wandb", "wandb").init(
            project="selector-lens",
            name=run.path.name,
            dir=str(run.path),
            config=options,
            mode="offline",
            reinit="create_new",
        )

    def write(self, row: dict) -> None:
        self.run.log(scalars(row), step=row["step"])

    def close(self) -> None:
        self.run.finish()


TRACKERS = {"tensorboard": TensorBoard, "wandb": WandB}


def check_tracker(name: str | None) -> None:
    """One line for a tracker name that is not one (before anything is written)."""
    if name is not None and name not in TRACKERS:
        raise SelectorLensError(f"unknown tracker {name!r}; choose one of {', '.join(TRACKERS)}")


def open_tracker(name: str | None, run, options: dict):
    """The tracker `name` (checked by `check_tracker`) for `run`; None for none."""
    return None if name is None else TRACKERS[name](run, options)
