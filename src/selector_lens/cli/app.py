"""The `selector-lens` app and what its commands share: option types, one option per config
field (`config_options`), opening a run, and the guard that turns bad input into one line and
exit code 2. The commands live by wing: `training`, `analysis`, `paper`.

Only typer and the pure config dataclasses load at import, so `--help` is instant; torch and
TransformerLens load inside the command that needs them.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Annotated

import typer

from selector_lens.cli import format as fmt
from selector_lens.config import OPTIONS
from selector_lens.errors import SelectorLensError

app = typer.Typer(
    help="Watch a transformer go from the marginal P(A|B) to the conditional P(A|B,z).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _print_version(value: bool | None) -> None:
    if value:
        from selector_lens import __version__

        print(f"selector-lens {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool | None = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """Watch a transformer go from the marginal P(A|B) to the conditional P(A|B,z)."""


RUN_HELP = "Run directory (default: the latest run under checkpoints/)."


# Options several commands share, declared once.
RunOpt = Annotated[Path | None, typer.Option(help=RUN_HELP)]


JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


StepOpt = Annotated[int | None, typer.Option(help="One checkpoint step.")]


PhaseOpt = Annotated[str | None, typer.Option(help="pre (τ/4) | mid (3τ/4) | post (1.5τ) | final.")]


EveryOpt = Annotated[int | None, typer.Option(help="Every n-th checkpoint.")]


ExecutorOpt = Annotated[str, typer.Option(help="local | ray | batched (see `sweep`).")]


WorkersOpt = Annotated[int | None, typer.Option(help="Parallel runs (default: one per core).")]


RootOpt = Annotated[
    Path | None, typer.Option(help="Where the runs go (default checkpoints/reproduce/<scale>).")
]


# what typer hands a command (typer.Context is a subclass it never instantiates; a runtime type
# check of the callback wants the class of the object itself)
ClickContext = typer.Context.__base__


def config_options(func):
    """Give a command one option per config field (`config.OPTIONS`: name, type, default and help
    come from the dataclasses), ahead of its own options; it receives them in `**options`."""
    kw = inspect.Parameter.KEYWORD_ONLY
    own = [
        p.replace(kind=kw)
        for p in inspect.signature(func, eval_str=True).parameters.values()
        if p.kind is not p.VAR_KEYWORD
    ]
    made = [
        inspect.Parameter(name, kw, annotation=o.type, default=typer.Option(o.default, help=o.help))
        for name, o in OPTIONS.items()
    ]
    func.__signature__ = inspect.Signature(made + own)
    func.__annotations__ = {p.name: p.annotation for p in made + own}
    return func


def _open_run(run: Path | None, command: str, any_task: bool = False):
    """The run (the latest one if None) for `command`. A command that reads the selector's
    positions and metrics (z, the candidates) and not a task's protocol (`any_task` False) says
    so in one line for a run of another task."""
    from selector_lens.runs.run import Run

    r = Run.open(run, progress=True) if run is not None else Run.latest(progress=True)
    task = r.config.task
    if task.name != "selector" and not any_task:
        raise SelectorLensError(
            f"`{command}` reads the selector's positions and metrics (z, the candidates); "
            f"{r.path} is a run of the {task.name} task, which it does not read yet"
        )
    return r


def _steps(run, step, phase, every) -> list[tuple[str | None, int]]:
    """`Run.labelled_steps`, saying so when a run without τ falls back to its final step."""
    if step is None and phase is None and every is None and run.tau() is None:
        print(
            f"note: {run.path} never reaches {run.transition_line()}; reporting the final step only",
            file=sys.stderr,
        )
    return run.labelled_steps(step, phase, every)


def spread(items: list, n: int) -> list:
    """At most `n` of `items`, evenly spread from the first to the last."""
    if len(items) <= n:
        return list(items)
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)]


def _check_scale_and_executor(scale: str | None, executor: str) -> None:
    from selector_lens.paper.presets import SCALES
    from selector_lens.training.sweep import EXECUTORS

    if scale is not None and scale not in SCALES:
        raise SelectorLensError(f"unknown scale {scale!r}; choose one of {', '.join(SCALES)}")
    if executor not in EXECUTORS:
        raise SelectorLensError(
            f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}"
        )


def _claims(title: str, summary: dict) -> None:
    """A report's claims as a table: number, title, verdict."""
    fmt.table(
        title,
        ["#", "claim", "verdict"],
        [[c["number"], c["title"], c["verdict"]] for c in summary["claims"]],
    )


def main(args: list[str] | None = None) -> None:
    """Console-script entry (and the analyses/ scripts'): bad input becomes one line on stderr
    and exit code 2."""
    _run_guarded(app, args)


def _run_guarded(typer_app, args: list[str] | None = None) -> None:
    """Run the app with the command line's own errors in our shape too: an unknown command or
    option, or a value of the wrong type, is one line on stderr and exit code 2."""
    try:
        code = typer_app(args, standalone_mode=False)
    except SelectorLensError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except typer.TyperException as e:  # click's usage errors, as typer carries them
        ctx = getattr(e, "ctx", None)
        if type(e).__name__ == "NoArgsIsHelpError" and ctx is not None:
            print(ctx.get_help())  # a bare command shows its help, as click does
            sys.exit(2)
        where = f"{ctx.command_path}: " if ctx is not None else ""
        print(f"error: {where}{' '.join(e.format_message().split())}", file=sys.stderr)
        sys.exit(getattr(e, "exit_code", 2))
    except typer.Abort:
        print("aborted", file=sys.stderr)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


def in_order(typer_app, order: list) -> None:
    """Sort `typer_app`'s commands by `order`: command names, or modules whose commands keep
    the order they were defined in."""
    import types

    def rank(info) -> tuple[int, int]:
        for i, item in enumerate(order):
            if isinstance(item, types.ModuleType):
                if info.callback.__module__ == item.__name__:
                    return i, info.callback.__code__.co_firstlineno
            elif (info.name or info.callback.__name__.replace("_", "-")) == item:
                return i, 0
        return len(order), 0

    typer_app.registered_commands.sort(key=rank)
