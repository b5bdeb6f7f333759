"""The task protocol: what a task says, so that everything outside `task/` reads a task only
through it (docs/architecture.md). A task is one frozen dataclass (its fields are its options)
with a handful of members; the model, the optimizer and the run directory stay in their wings.

    name            the task's name in run.json and on the CLI (`--task NAME`)
    d_vocab         tokens the model embeds and predicts
    seq_len         tokens of one example
    loss_start      the first position whose next-token prediction the loss reads (to the end)
    n_examples      examples in the training set
    metrics         {metric: what it measures, with its unit}: the rows `evaluate` returns
    generate()      the training set from the task's seed (`.tokens` [examples, seq_len], and
                    `.to_json()`, stored as the run's data.json)
    load(stored)    the training set again from data.json
    eval_set(data, seed, groups, eval_groups)  the fixed evaluation set (`groups`: a run's
                    recorded choice; `eval_groups`: TrainConfig's, how much to evaluate)
    evaluate(model, eval_set, intervention)  one evaluation row {metric: value}; optional: the
                    model wing's `model.evaluation.evaluate` reads the task's loss positions
                    without it (the selector's rows are its cached passes, `model.metrics`)
    transition(rows)  the step of the task's transition in a run's rows (None: not yet)
    solved(row, first, cfg)  is this row past the early-stop line (`first`: the step-0 row;
                    `cfg`: the TrainConfig, whose early_stop_frac is in the task's own unit)?
    positions       {name: what it is}: the positions of interest (attention from a query position
                    to a key position), named

Optional members, read by the instruments (`ablate-head`, `attention`, `patch`, `dashboard`)
through the functions below, each with a default or one clear line where it is missing:

    headline        the metric the instruments rank heads by (default "loss")
    focus(es)       Bool [examples, seq_len - 1]: the predictions the transition is about, over
                    `es.tokens` (default: every prediction from loss_start on)
    position_pairs(es)  {name: (queries, keys)}, each Int [examples, pairs]: where each named
                    position of interest points in each example of `es.tokens`
    corrupt(es, seed)   `es.tokens` with what the focus predictions need taken away (the
                    selector: z deranged): patching's corrupted input and the Δ gap's

The selector (`SelectorTask`) is the first implementation; `modular.ModularTask` the second. A
user's task is one class in a file (`--task path/to/file.py:ClassName`): a task file is Python
and runs with the user's rights when loaded.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from dataclasses import is_dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from selector_lens.errors import SelectorLensError

MEMBERS = (
    "name",
    "d_vocab",
    "seq_len",
    "loss_start",
    "n_examples",
    "metrics",
    "positions",
    "generate",
    "load",
    "eval_set",
    "transition",
    "solved",
)


@runtime_checkable
class Task(Protocol):
    """What a task must say (the module docstring explains each member)."""

    name: ClassVar[str]
    metrics: ClassVar[dict[str, str]]
    positions: ClassVar[dict[str, str]]

    @property
    def d_vocab(self) -> int: ...

    @property
    def seq_len(self) -> int: ...

    @property
    def loss_start(self) -> int: ...

    @property
    def n_examples(self) -> int: ...

    def generate(self) -> Any: ...

    def load(self, stored: dict) -> Any: ...

    def eval_set(self, data, seed: int, groups=None, eval_groups="auto") -> Any: ...

    def transition(self, rows: list[dict]) -> int | None: ...

    def solved(self, row: dict, first: dict, cfg=None) -> bool: ...


BUILT_IN = {
    "selector": "selector_lens.task.selector:SelectorTask",
    "modular": "selector_lens.task.modular:ModularTask",
    "induction": "selector_lens.task.induction:InductionTask",
}


def check_task_class(cls, where: str) -> type:
    """`cls` if it implements the protocol (a dataclass with every member), else one line
    naming what is missing."""
    if not isinstance(cls, type) or not is_dataclass(cls):
        raise SelectorLensError(f"{where} is not a dataclass: a task is a frozen dataclass")
    missing = [m for m in MEMBERS if not hasattr(cls, m)]
    if missing:
        raise SelectorLensError(
            f"{where} does not implement the task protocol: missing {', '.join(missing)}"
        )
    return cls


def task_class(name: str) -> type:
    """The class of a task by name: a built-in (`selector`, `modular`), a module path
    (`pkg.mod:ClassName`) or a file (`path/to/file.py:ClassName`, run with the user's rights)."""
    spec = BUILT_IN.get(name, name)
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise SelectorLensError(
            f"unknown task {name!r}; choose one of {', '.join(BUILT_IN)}, or give "
            "path/to/file.py:ClassName or package.module:ClassName"
        )
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                raise SelectorLensError(f"task file {path} does not exist")
            key = f"selector_lens_user_task_{abs(hash(str(path.resolve())))}"
            module = sys.modules.get(key)
            if module is None:
                loader = importlib.util.spec_from_file_location(key, path)
                module = importlib.util.module_from_spec(loader)
                sys.modules[key] = module
                loader.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except SelectorLensError:
        raise
    except Exception as e:  # the user's module failed to import: one line, its error named
        raise SelectorLensError(f"task {name!r} failed to load: {type(e).__name__}: {e}") from None
    cls = getattr(module, attr, None)
    if cls is None:
        raise SelectorLensError(f"task {name!r}: {module_name} has no {attr}")
    cls = check_task_class(cls, name)
    if name not in BUILT_IN and module_name.endswith(".py"):  # by its full path: a run of it
        cls.source = f"{Path(module_name).resolve()}:{attr}"  # opens from any directory
    return cls


def headline(task) -> str:
    """The metric a task's heads are ranked by (its `headline`, else the loss)."""
    return getattr(task, "headline", "loss")


def focus(task, es):
    """Bool [examples, seq_len - 1]: the predictions the task's transition is about."""
    if hasattr(task, "focus"):
        return task.focus(es)
    import torch

    mask = torch.zeros(len(es.tokens), task.seq_len - 1, dtype=torch.bool)
    mask[:, task.loss_start :] = True
    return mask


NEEDS = {
    "position_pairs": "names no positions of interest: give it a position_pairs(es) method",
    "corrupt": "has no corrupted input to patch from: give it a corrupt(es, seed) method",
}


def require(task, member: str) -> None:
    """One clear line for a task without an optional member an instrument reads."""
    if not hasattr(task, member):
        raise SelectorLensError(f"the {task.name} task {NEEDS[member]} (docs/recipes/tasks.md)")


def position_pairs(task, es) -> dict:
    """{name: (queries, keys)} of the task's positions of interest, or one clear line."""
    require(task, "position_pairs")
    return task.position_pairs(es)


def corrupted(task, es, seed: int = 0):
    """The task's corrupted copy of `es.tokens`, or one clear line."""
    require(task, "corrupt")
    tokens = task.corrupt(es, seed)
    if tuple(tokens.shape) != tuple(es.tokens.shape):
        raise SelectorLensError(
            f"the {task.name} task's corrupt() returned shape {tuple(tokens.shape)}, not "
            f"{tuple(es.tokens.shape)} like its tokens"
        )
    return tokens


def task_name(task) -> str:
    """How run.json names a task's class, so that `task_class` finds it again: its built-in
    name, `package.module:Class` where that module imports, else `/full/path.py:Class`."""
    cls = type(task)
    if "source" in vars(cls):
        return cls.source
    if BUILT_IN.get(getattr(cls, "name", None)) == f"{cls.__module__}:{cls.__qualname__}":
        return cls.name
    module = sys.modules.get(cls.__module__)
    path = getattr(module, "__file__", None)
    try:  # importable from sys.path (not only registered by hand in sys.modules)?
        name = cls.__module__
        if "." in name:
            spec = importlib.util.find_spec(name)
        else:
            spec = importlib.machinery.PathFinder.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin and path and Path(spec.origin) == Path(path):
        return f"{cls.__module__}:{cls.__qualname__}"
    if path is None:
        raise SelectorLensError(f"task class {cls.__qualname__} has no file to load it from again")
    return f"{Path(path).resolve()}:{cls.__qualname__}"
