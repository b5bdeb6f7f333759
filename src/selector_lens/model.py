"""The paper's HookedTransformer, and the one place that builds, saves and loads its weights.

Keeping construction and loading here means a later move to TransformerBridge stays local.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from .errors import SelectorLensError
from .config import ModelConfig
from .files import atomic_write
from .task import SelectorTask


def build_model(cfg: ModelConfig, task: SelectorTask, seed: int = 42, device: str = "cpu"):
    """A freshly initialised HookedTransformer, the same for the same seed."""
    import warnings

    from transformer_lens import HookedTransformer

    with warnings.catch_warnings():  # TL 3.x announces the 4.0 move on every construction
        warnings.simplefilter("ignore", DeprecationWarning)
        model = HookedTransformer(cfg.hooked_config(task, seed, device))
    return model.to(device, print_details=False)


# Fields added after checkpoints were first written, at the value that reproduces the old
# behaviour: left out of the hash, so those checkpoints still belong to their runs.
LATER_FIELDS = {"parity": "ours", "z_groups": 1}


def config_hash(*configs) -> str:
    """Short stable hash of dataclass configs: ties a checkpoint to the run that wrote it."""
    dicts = [
        {k: v for k, v in asdict(c).items() if LATER_FIELDS.get(k, object()) != v} for c in configs
    ]
    blob = json.dumps(dicts, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _checksum(state: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(state):
        h.update(name.encode())
        h.update(state[name].detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def save_weights(model, path: Path, step: int, cfg_hash: str) -> None:
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    meta = {"step": str(step), "config_hash": cfg_hash, "checksum": _checksum(state)}
    atomic_write(path, lambda tmp: save_file(state, str(tmp), metadata=meta))


def read_checkpoint(path: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """A checkpoint's tensors and metadata, its checksum verified (one clear error otherwise)."""
    path = Path(path)
    if not path.is_file():
        raise SelectorLensError(f"missing checkpoint: {path}")
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        state = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise SelectorLensError(f"corrupt checkpoint: {path} ({e})") from None
    if meta.get("checksum") != _checksum(state):
        raise SelectorLensError(f"corrupt checkpoint: {path} (checksum mismatch)")
    return state, meta


def load_weights(model, path: Path, cfg_hash: str | None = None) -> int:
    """Load a checkpoint in place into `model`, verifying its checksum; returns its step."""
    state, meta = read_checkpoint(path)
    if cfg_hash is not None and meta.get("config_hash") != cfg_hash:
        raise SelectorLensError(f"checkpoint {path} belongs to another run (config hash differs)")
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        raise SelectorLensError(f"checkpoint {path} does not fit this model: {e}") from None
    return int(meta["step"])
