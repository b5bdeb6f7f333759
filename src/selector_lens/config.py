"""Frozen configs that drive both the Python API and the CLI (SAELens style).

Pure dataclasses, no torch: the CLI imports this module to build its options and stays instant.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace

from selector_lens.errors import SelectorLensError
from selector_lens.fields import check_fields, checked, label, option
from selector_lens.task.induction import InductionTask
from selector_lens.task.modular import ModularTask
from selector_lens.task.protocol import Task, task_class, task_name
from selector_lens.task.selector import SelectorTask

# the built-in tasks whose fields are flat options (a user's task is configured in Python)
TASKS = {cls.name: cls for cls in (SelectorTask, ModularTask, InductionTask)}

# What fused.forward reproduces (training and evaluation run through it; see model/fused.py).
ACT_FNS = ("gelu", "gelu_new", "relu", "silu")
NORMS = ("LN", None)


@dataclass(frozen=True)
class ModelConfig:
    """Paper defaults: 4 layers x 4 heads, d_model 128, d_mlp 512, GELU, pre-LN (~0.8M params).

    `n_ctx=None` takes the task's sequence length, but at least 16 (32 with parity "paper").
    """

    n_layers: int = option(4, "Transformer blocks.")
    n_heads: int = option(4, "Attention heads per block.")
    d_model: int = option(128, "Residual stream width.")
    d_head: int = option(32, "Width of one head.")
    d_mlp: int = option(512, "MLP hidden width.")
    act_fn: str = option("gelu", "MLP activation.", ACT_FNS)
    normalization_type: str | None = option("LN", "LN (pre-LN) or none.", ("LN", "none"))
    n_ctx: int | None = option(None, "Context length (default: the task's length, at least 16).")
    attn_only: bool = option(False, "Attention only, no MLPs (the induction-head models).")
    positional_embedding_type: str = option(
        "standard",
        "standard (added to the residual stream) or shortformer (added to queries and keys only, "
        "as in Nanda's attn-only toy models: induction heads form cleanly).",
        ("standard", "shortformer"),
    )

    def __post_init__(self):
        check_fields(self)
        for name in ("n_layers", "n_heads", "d_model", "d_head", "d_mlp"):
            if getattr(self, name) < 1:
                raise SelectorLensError(f"model {name} must be >= 1, got {getattr(self, name)}")
        if self.normalization_type in ("none", "None"):  # how the CLI and YAML say None
            object.__setattr__(self, "normalization_type", None)
        if self.act_fn not in ACT_FNS:
            raise SelectorLensError(
                f"unknown act_fn {self.act_fn!r}; choose one of {', '.join(ACT_FNS)}"
            )
        if self.positional_embedding_type not in ("standard", "shortformer"):
            raise SelectorLensError(
                f"unknown positional_embedding_type {self.positional_embedding_type!r}; "
                "choose standard or shortformer"
            )
        if self.normalization_type not in NORMS:
            raise SelectorLensError(
                f"unknown normalization_type {self.normalization_type!r}; choose 'LN' or None"
            )


SCHEDULES = ("constant", "cosine")
OPTIMIZERS = ("adamw", "sgd")
CADENCES = ("adaptive", "dense")  # when to evaluate (training/cadence.py)
# what a resume may change: a longer budget (and whether it stops early), another device, how
# often states are kept, and whether the step is compiled (the same step to float rounding)
RESUMABLE = ("steps", "early_stop", "device", "state_every", "compile")
STATE_EVERY = 250  # the default: ~6 states on the K = 10 baseline's plateau (τ ~ 1,500)
DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class TrainConfig:
    """Paper defaults: AdamW lr 1e-3, wd 0.01, batch 128, constant lr, no warmup, clip 1.0.

    Dense by default: metrics and a weight checkpoint every 50 steps. Early stop once the
    candidate loss has stayed below `early_stop_frac` x log K for `early_stop_evals` evals
    (for the reverse directions, which have no candidates: the token loss below
    `early_stop_frac` nats; `b_to_a` never stops early, its floor is log K).
    """

    task: Task = field(default_factory=SelectorTask)
    model: ModelConfig = field(default_factory=ModelConfig)
    steps: int = option(6000, "Maximum optimizer steps.")
    batch_size: int = option(128, "Examples per step.")
    lr: float = option(1e-3, "Learning rate.")
    weight_decay: float = option(0.01, "Weight decay (AdamW: decoupled; SGD: L2).")
    optimizer: str = option("adamw", "The optimizer.", OPTIMIZERS)
    momentum: float = option(0.0, "SGD momentum (optimizer sgd only).")
    beta1: float = option(0.9, "AdamW beta1.")
    beta2: float = option(0.999, "AdamW beta2.")
    grad_clip: float = option(1.0, "Max gradient norm; 0 turns clipping off.")
    schedule: str = option("constant", "Learning-rate schedule after warmup.", SCHEDULES)
    warmup_steps: int = option(0, "Steps of linear warmup.")
    cosine_steps: int | None = option(
        None, "Step at which the cosine schedule reaches 0 (default: steps)."
    )
    eval_every: int = option(
        50, "Steps between evaluations: the grid (the adaptive cadence skips its quiet steps)."
    )
    eval_cadence: str = option(
        "adaptive",
        "adaptive: evaluate every eval_every steps while the training loss or the evaluations "
        "move (through a transition) and every 4 x eval_every on a plateau | dense: every "
        "eval_every steps (training/cadence.py).",
        CADENCES,
    )
    ckpt_every: int = option(50, "Steps between weight checkpoints.")
    state_every: int | None = option(
        None,
        "Keep the full training state (optimizer moments, step) every N steps, a multiple of "
        f"ckpt_every, beside that step's weights: where `branch` can start. Default: "
        f"{STATE_EVERY} (rounded up to a multiple of ckpt_every); 0: the last state only.",
    )
    compile: bool = option(
        False,
        "torch.compile the forward and loss (inductor): ~7 % faster a CPU step after ~50 s of "
        "compiling, a gain past ~6,000 steps (benchmarks/bench_floor.py).",
    )
    eval_groups: str = option(
        "auto", "Groups evaluated: auto (all up to 100, else a seeded 100), all, or a count."
    )
    early_stop: bool = option(
        True,
        "Stop once the candidate loss stays below early_stop_frac x log K "
        "for early_stop_evals evals.",
    )
    early_stop_frac: float = option(
        0.05, "Early-stop line, in units of log K (reverse directions: nats)."
    )
    early_stop_evals: int = option(10, "Evals in a row below the early-stop line.")
    early_stop_acc: float | None = option(
        None,
        "Early-stop line as token accuracy instead: an eval counts once token accuracy reaches "
        "it and the first-target loss is below 0.1 x its step-0 value (the paper's lag rule).",
    )
    seed: int = option(
        42, "Seed of the model init and the data order (and of the dataset, unless data_seed)."
    )
    device: str = option("cpu", "Where to train.", DEVICES)

    def __post_init__(self):
        check_fields(self)
        for name in ("steps", "batch_size", "eval_every", "ckpt_every", "early_stop_evals"):
            if getattr(self, name) < 1:
                raise SelectorLensError(
                    f"{name} must be a positive integer, got {getattr(self, name)}"
                )
        if self.state_every is not None and (
            self.state_every < 0 or self.state_every % self.ckpt_every
        ):
            raise SelectorLensError(
                f"state_every must be 0 or a multiple of ckpt_every ({self.ckpt_every}), got "
                f"{self.state_every}"
            )
        if not self.lr > 0:
            raise SelectorLensError(f"lr must be positive, got {self.lr}")
        if self.weight_decay < 0 or self.grad_clip < 0 or self.warmup_steps < 0:
            raise SelectorLensError("weight_decay, grad_clip and warmup_steps must be >= 0")
        if self.optimizer not in OPTIMIZERS:
            raise SelectorLensError(
                f"unknown optimizer {self.optimizer!r}; choose one of {', '.join(OPTIMIZERS)}"
            )
        if not 0 <= self.momentum < 1:
            raise SelectorLensError(f"momentum must lie in [0, 1), got {self.momentum}")
        for name in ("beta1", "beta2"):
            if not 0 <= getattr(self, name) < 1:
                raise SelectorLensError(f"{name} must lie in [0, 1), got {getattr(self, name)}")
        if self.seed < 0:
            raise SelectorLensError(f"seed must be >= 0, got {self.seed}")
        if not self.early_stop_frac > 0:
            raise SelectorLensError(f"early_stop_frac must be positive, got {self.early_stop_frac}")
        if self.eval_cadence not in CADENCES:
            raise SelectorLensError(
                f"unknown eval cadence {self.eval_cadence!r}; choose one of {', '.join(CADENCES)}"
            )
        if self.schedule not in SCHEDULES:
            raise SelectorLensError(
                f"unknown schedule {self.schedule!r}; choose one of {', '.join(SCHEDULES)}"
            )
        if self.early_stop_acc is not None and not 0 < self.early_stop_acc <= 1:
            raise SelectorLensError(f"early_stop_acc must be in (0, 1], got {self.early_stop_acc}")
        if self.cosine_steps is not None and self.cosine_steps <= self.warmup_steps:
            raise SelectorLensError(
                f"cosine_steps must exceed warmup_steps ({self.warmup_steps}), "
                f"got {self.cosine_steps}"
            )
        if self.device not in DEVICES:
            raise SelectorLensError(
                f"unknown device {self.device!r}; choose one of {', '.join(DEVICES)}"
            )
        if self.model.n_ctx is not None and self.model.n_ctx < self.task.seq_len:
            raise SelectorLensError(
                f"n_ctx={self.model.n_ctx} is shorter than the task's {self.task.seq_len} tokens"
            )
        if not isinstance(self.eval_groups, str):
            object.__setattr__(self, "eval_groups", str(self.eval_groups))
        if self.eval_groups not in ("auto", "all") and not (
            self.eval_groups.isdigit() and int(self.eval_groups) > 0
        ):
            raise SelectorLensError(
                f"eval_groups must be 'auto', 'all' or a positive count, got {self.eval_groups!r}"
            )

    @property
    def states_at(self) -> int:
        """Steps between kept training states (0: none but the last): `state_every`, or by
        default STATE_EVERY rounded up to a multiple of `ckpt_every`."""
        if self.state_every is not None:
            return self.state_every
        return -(-STATE_EVERY // self.ckpt_every) * self.ckpt_every

    @property
    def name(self) -> str:
        """The run's name (its default directory): `run_name` of its options."""
        return run_name(self.options())

    def options(self) -> dict:
        """The config as flat options (`OPTIONS` names), what `from_options` reads back: the
        task's own fields, the model's, training's, and `task` (its name)."""
        sections = {"task": self.task, "model": self.model, "train": self}
        name = task_name(self.task)
        out = {
            n: getattr(sections[o.section], o.field)
            for n, o in OPTIONS.items()
            if o.section in ("model", "train") or name in o.tasks
        }
        out.update(task=name)
        return out

    def to_dict(self) -> dict:
        """run.json's config: the selector's task as its fields (as runs have always stored
        it); any other task with its name first."""
        d = asdict(self)
        if not isinstance(self.task, SelectorTask):
            d["task"] = {"name": task_name(self.task), **d["task"]}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        d = {"eval_cadence": "dense", **d}  # run.json from before the cadence: every grid step
        d = {k: v for k, v in d.items() if k in known}
        task = dict(d.get("task", {}))
        kind = task_class(task.pop("name", "selector"))
        return cls(**{**d, "task": kind(**task), "model": ModelConfig(**d.get("model", {}))})

    def differences(self, other: TrainConfig, ignore=RESUMABLE) -> list[str]:
        """Settings that differ from `other` ('lr: 0.001 != 0.002'), nested configs flattened."""
        a, b = _flat(self.to_dict()), _flat(other.to_dict())
        return [
            f"{k}: {a.get(k)} != {b.get(k)}"
            for k in sorted(a.keys() | b.keys())
            if k not in ignore and a.get(k) != b.get(k)
        ]


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


@dataclass(frozen=True)
class Option:
    """One flat option name (the CLI's `--n-bases`, a sweep's `n_bases`) and the config field it sets."""

    section: str  # "task", "model", "train", or "choice" (`task`: which task)
    field: str
    type: object  # a type, or a union with None
    default: object
    help: str
    choices: tuple
    tasks: tuple = ()  # a task option: the built-in tasks that have it


def _options() -> dict[str, Option]:
    import typing

    out = {
        "task": Option(
            "choice",
            "task",
            str,
            "selector",
            "The task: selector, modular, induction, or a class of yours (path/to/file.py:ClassName, "
            "package.module:ClassName; a task file is Python and runs with your rights).",
            (),
        )
    }
    sections = [("task", cls) for cls in TASKS.values()]
    for section, cls in [*sections, ("model", ModelConfig), ("train", TrainConfig)]:
        hints = typing.get_type_hints(cls)
        for f in fields(cls):
            if f.name in ("task", "model"):
                continue
            name = "data_seed" if (section, f.name) == ("task", "seed") else f.name
            if name in out and section == "task":  # a field two tasks share
                out[name] = replace(out[name], tasks=(*out[name].tasks, cls.name))
                continue
            choices = tuple(c for c in f.metadata.get("choices", ()) if c is not None)
            help = f.metadata["help"] + (f" One of {', '.join(choices)}." if choices else "")
            if section == "task" and cls is not SelectorTask:
                help += f" ({cls.name} task)"
            default = None if name == "data_seed" else f.default
            tasks = (cls.name,) if section == "task" else ()
            out[name] = Option(section, f.name, hints[f.name], default, help, choices, tasks)
    out["data_seed"] = replace(
        out["data_seed"], type=int | None, help="Seed of the sampled strings (default: --seed)."
    )
    return out


# Every config field under one flat name: `seed` seeds the model, the data order and (unless
# `data_seed` is given) the dataset; the CLI and sweeps both read this table.
OPTIONS = _options()


def from_options(options: dict) -> TrainConfig:
    """A TrainConfig from flat option names (OPTIONS, plus `D`, which sets n_bases = round(D / k):
    the run's exact D is n_bases x k). Options set to None take their default."""
    options = coerce({k: v for k, v in options.items() if v is not None})
    if "D" in options:
        d, k = checked("D", options.pop("D"), float), options.get("k", SelectorTask.k)
        if not d > 0:
            raise SelectorLensError(f"D must be positive, got {d}")
        if "n_bases" in options:
            raise SelectorLensError("give D or n_bases, not both")
        options["n_bases"] = max(1, round(d / k))
    unknown = set(options) - set(OPTIONS)
    if unknown:
        raise SelectorLensError(f"unknown option(s): {', '.join(sorted(map(label, unknown)))}")
    kind = task_class(checked("task", options.pop("task", "selector"), str))
    parts: dict = {"task": {}, "model": {}, "train": {}}
    for name, value in options.items():
        o = OPTIONS[name]
        if o.section == "task" and kind.name not in o.tasks:
            if value == o.default:  # another task's option left at its default (the CLI's)
                continue
            raise SelectorLensError(
                f"{label(name)} is an option of the {' and '.join(o.tasks)} task, not of "
                f"the {kind.name} task"
            )
        parts[o.section][o.field] = checked(name, value, o.type)
    if "seed" in {f.name for f in fields(kind)}:  # the dataset's seed follows --seed
        parts["task"].setdefault("seed", parts["train"].get("seed", TrainConfig.seed))
    return TrainConfig(
        task=kind(**parts["task"]), model=ModelConfig(**parts["model"]), **parts["train"]
    )


def coerce(options: dict) -> dict:
    """Values as their fields' types (YAML and --grid read 3e-3 as a string)."""
    out = dict(options)
    for name, value in out.items():
        kind = OPTIONS[name].type if name in OPTIONS else float if name == "D" else None
        if isinstance(value, str) and kind in (int, float, int | None):
            try:
                out[name] = float(value) if kind is float else int(value)
            except ValueError:
                raise SelectorLensError(f"option {name} needs a number, got {value!r}") from None
    return out


# What a run's name shows beyond K, n_bases and seed (when it differs from the default), in order.
NAME_ORDER = (
    "parity",
    "direction",
    "lr",
    "batch_size",
    "z_length",
    "z_groups",
    "schedule",
    "early_stop_acc",
    "optimizer",
    "momentum",
    "state_every",
)
SHORT = {
    "batch_size": "bs",
    "z_length": "z",
    "z_groups": "g",
    "early_stop_acc": "acc",
    "momentum": "mom",
    "state_every": "st",
}


def run_name(options: dict) -> str:
    """The one name of a run, from its flat options: `k10-nb1000-s42`, `k20-nb1000-lr0.002-s42`,
    `k10-nb1000-a_to_b-s43`, `k20-nb1000-bs64-s42`: K, n_bases and seed always, then what the
    studies vary, where it differs from the default (`TrainConfig.name`, the presets' runs)."""
    task = options.get("task", "selector")
    if task != "selector":  # another task: its name, then its options that differ from default
        cls = task_class(task)
        parts = [cls.name] + [
            f"{f.name}{options[f.name]:g}"
            if isinstance(options.get(f.name), (int, float))
            else f"{f.name}-{options[f.name]}"
            for f in fields(cls)
            if f.name != "seed" and f.name in options and options[f.name] != f.default
        ]
        return "-".join(parts + [f"s{options.get('seed', TrainConfig.seed)}"])
    parts = [f"k{options.get('k', SelectorTask.k)}", f"nb{options['n_bases']}"]
    for key in NAME_ORDER:
        if key in options and options[key] != OPTIONS[key].default:
            v = options[key]
            parts.append(v if isinstance(v, str) else f"{SHORT.get(key, key)}{v:g}")
    return "-".join(parts + [f"s{options.get('seed', TrainConfig.seed)}"])
