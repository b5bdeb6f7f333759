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

from selector_lens.config import ModelConfig
from selector_lens.errors import SelectorLensError
from selector_lens.files import atomic_write
from selector_lens.task.paper import MODEL_SEED, N_CTX
from selector_lens.task.protocol import Task


def build_model(cfg: ModelConfig, task: Task, seed: int = 42, device: str = "cpu"):
    """A freshly initialised HookedTransformer, the same for the same seed."""
    import warnings

    from transformer_lens import HookedTransformer

    with warnings.catch_warnings():  # TL 3.x announces the 4.0 move on every construction
        warnings.simplefilter("ignore", DeprecationWarning)
        model = HookedTransformer(hooked_config(cfg, task, seed, device))
    return model.to(device, print_details=False)


def hooked_config(cfg: ModelConfig, task: Task, seed: int, device: str = "cpu"):
    """The TransformerLens config of `cfg` for `task` (the paper's factory: n_ctx 32, seed 42)."""
    from transformer_lens import HookedTransformerConfig  # lazily: slow import

    if getattr(task, "parity", None) == "paper":  # the paper's factory: n_ctx 32, seed 42
        n_ctx, seed = cfg.n_ctx or N_CTX, MODEL_SEED
    else:
        n_ctx = cfg.n_ctx or max(16, task.seq_len)
    if n_ctx < task.seq_len:
        raise SelectorLensError(f"n_ctx={n_ctx} is shorter than the task's {task.seq_len} tokens")
    return HookedTransformerConfig(
        n_layers=cfg.n_layers,
        n_heads=cfg.n_heads,
        d_model=cfg.d_model,
        d_head=cfg.d_head,
        d_mlp=cfg.d_mlp,
        attn_only=cfg.attn_only,
        act_fn=cfg.act_fn,
        normalization_type=cfg.normalization_type,
        positional_embedding_type=cfg.positional_embedding_type,
        n_ctx=n_ctx,
        d_vocab=task.d_vocab,
        seed=seed,
        device=device,
    )


# Fields added after checkpoints were first written, at the value that reproduces the old
# behaviour: left out of the hash, so those checkpoints still belong to their runs.
LATER_FIELDS = {
    "parity": "ours",
    "z_groups": 1,
    "attn_only": False,
    "positional_embedding_type": "standard",
}


def config_hash(*configs) -> str:
    """Short stable hash of dataclass configs: ties a checkpoint to the run that wrote it."""
    dicts = [
        {k: v for k, v in asdict(c).items() if LATER_FIELDS.get(k, object()) != v} for c in configs
    ]
    blob = json.dumps(dicts, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def tensors_checksum(state: dict[str, torch.Tensor]) -> str:
    """sha256 over named tensors (names sorted): what a checkpoint records and is checked against."""
    h = hashlib.sha256()
    for name in sorted(state):
        h.update(name.encode())
        h.update(state[name].detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def save_weights(model, path: Path, step: int, cfg_hash: str) -> None:
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    meta = {"step": str(step), "config_hash": cfg_hash, "checksum": tensors_checksum(state)}
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
    if meta.get("checksum") != tensors_checksum(state):
        raise SelectorLensError(f"corrupt checkpoint: {path} (checksum mismatch)")
    return state, meta


def load_weights(model, path: Path, cfg_hash: str | None = None, step: int | None = None) -> int:
    """Load a checkpoint in place into `model`, verifying its checksum (and, when given, the run's
    config hash and the step it must hold: a file copied over another step's name is refused);
    returns its step."""
    state, meta = read_checkpoint(path)
    if cfg_hash is not None and meta.get("config_hash") != cfg_hash:
        raise SelectorLensError(f"checkpoint {path} belongs to another run (config hash differs)")
    if step is not None and meta.get("step") != str(step):
        raise SelectorLensError(f"checkpoint {path} holds step {meta.get('step')}, not step {step}")
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        raise SelectorLensError(f"checkpoint {path} does not fit this model: {e}") from None
    return int(meta["step"])


def rng_after_init(model_cfg, task) -> torch.Tensor:
    """torch's global generator state right after the paper's model is built (it is where the
    DataLoader's seeds come from); computed in a forked generator, the caller's is untouched."""
    with torch.random.fork_rng(devices=[]):
        build_model(model_cfg, task, MODEL_SEED)
        return torch.get_rng_state()
