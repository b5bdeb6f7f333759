"""Frozen configs that drive both the Python API and the CLI (SAELens style).

Pure dataclasses, no torch: the CLI imports this module to build its options and stays instant.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from .errors import SelectorLensError
from .task import D_VOCAB, SelectorTask


# What fused.forward reproduces (training and evaluation run through it; see fused.py).
ACT_FNS = ("gelu", "gelu_new", "relu", "silu")
NORMS = ("LN", None)


@dataclass(frozen=True)
class ModelConfig:
    """Paper defaults: 4 layers x 4 heads, d_model 128, d_mlp 512, GELU, pre-LN (~0.8M params).

    `n_ctx=None` takes the task's sequence length, but at least 16 (32 with parity "paper").
    """

    n_layers: int = 4
    n_heads: int = 4
    d_model: int = 128
    d_head: int = 32
    d_mlp: int = 512
    act_fn: str = "gelu"
    normalization_type: str = "LN"
    n_ctx: int | None = None

    def __post_init__(self):
        for name in ("n_layers", "n_heads", "d_model", "d_head", "d_mlp"):
            if getattr(self, name) < 1:
                raise SelectorLensError(f"model {name} must be >= 1, got {getattr(self, name)}")
        if self.act_fn not in ACT_FNS:
            raise SelectorLensError(f"unknown act_fn {self.act_fn!r}; choose one of {', '.join(ACT_FNS)}")
        if self.normalization_type not in NORMS:
            raise SelectorLensError(
                f"unknown normalization_type {self.normalization_type!r}; choose 'LN' or None"
            )

    def hooked_config(self, task: SelectorTask, seed: int, device: str = "cpu"):
        from transformer_lens import HookedTransformerConfig  # lazily: slow import

        if task.parity == "paper":  # the paper's model factory: n_ctx 32 and seed 42, always
            from .parity import MODEL_SEED, N_CTX

            n_ctx, seed = self.n_ctx or N_CTX, MODEL_SEED
        else:
            n_ctx = self.n_ctx or max(16, task.seq_len)
        if n_ctx < task.seq_len:
            raise SelectorLensError(f"n_ctx={n_ctx} is shorter than the task's {task.seq_len} tokens")
        return HookedTransformerConfig(
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            d_model=self.d_model,
            d_head=self.d_head,
            d_mlp=self.d_mlp,
            act_fn=self.act_fn,
            normalization_type=self.normalization_type,
            positional_embedding_type="standard",
            n_ctx=n_ctx,
            d_vocab=D_VOCAB,
            seed=seed,
            device=device,
        )


SCHEDULES = ("constant", "cosine")
DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class TrainConfig:
    """Paper defaults: AdamW lr 1e-3, wd 0.01, batch 128, constant lr, no warmup, clip 1.0.

    Dense by default: metrics and a weight checkpoint every 50 steps. Early stop once the
    candidate loss has stayed below `early_stop_frac` x log K for `early_stop_evals` evals
    (for the reverse directions, which have no candidates: the token loss below
    `early_stop_frac` nats; `b_to_a` never stops early, its floor is log K).
    """

    task: SelectorTask = field(default_factory=SelectorTask)
    model: ModelConfig = field(default_factory=ModelConfig)
    steps: int = 6000
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.999
    grad_clip: float = 1.0  # 0 turns clipping off
    schedule: str = "constant"
    warmup_steps: int = 0
    eval_every: int = 50
    ckpt_every: int = 50
    eval_groups: str = "auto"  # 'auto' (all groups up to 100, else a seeded 100), 'all', or a count
    early_stop: bool = True
    early_stop_frac: float = 0.05
    early_stop_evals: int = 10
    seed: int = 42
    device: str = "cpu"

    def __post_init__(self):
        for name in ("steps", "batch_size", "eval_every", "ckpt_every", "early_stop_evals"):
            if getattr(self, name) < 1:
                raise SelectorLensError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if not self.lr > 0:
            raise SelectorLensError(f"lr must be positive, got {self.lr}")
        if self.weight_decay < 0 or self.grad_clip < 0 or self.warmup_steps < 0:
            raise SelectorLensError("weight_decay, grad_clip and warmup_steps must be >= 0")
        if self.schedule not in SCHEDULES:
            raise SelectorLensError(f"unknown schedule {self.schedule!r}; choose one of {', '.join(SCHEDULES)}")
        if self.task.parity == "paper" and (self.schedule != "constant" or self.warmup_steps):
            raise SelectorLensError("parity 'paper' follows the paper code's own lr schedule; leave schedule "
                                    "constant and warmup_steps 0")
        if self.device not in DEVICES:
            raise SelectorLensError(f"unknown device {self.device!r}; choose one of {', '.join(DEVICES)}")
        if not isinstance(self.eval_groups, str):
            object.__setattr__(self, "eval_groups", str(self.eval_groups))
        if self.eval_groups not in ("auto", "all") and not (
            self.eval_groups.isdigit() and int(self.eval_groups) > 0
        ):
            raise SelectorLensError(f"eval_groups must be 'auto', 'all' or a positive count, got {self.eval_groups!r}")

    @property
    def name(self) -> str:
        """Default run-directory name, e.g. `k10-nb1000-s42`."""
        t = self.task
        parts = [f"k{t.k}", f"nb{t.n_bases}"]
        if t.direction != "bz_to_a":
            parts.append(t.direction)
        if t.z_length != 2:
            parts.append(f"z{t.z_length}")
        return "-".join(parts + [f"s{self.seed}"])

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        d = {k: v for k, v in d.items() if k in known}
        return cls(**{**d, "task": SelectorTask(**d.get("task", {})), "model": ModelConfig(**d.get("model", {}))})

    def differences(self, other: "TrainConfig", ignore=("steps", "device")) -> list[str]:
        """Settings that differ from `other` ('lr: 0.001 != 0.002'), nested configs flattened."""
        a, b = _flat(self.to_dict()), _flat(other.to_dict())
        return [f"{k}: {a.get(k)} != {b.get(k)}" for k in sorted(a.keys() | b.keys())
                if k not in ignore and a.get(k) != b.get(k)]


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out
