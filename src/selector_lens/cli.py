"""The `selector-lens` command line: thin shells over the Python API.

Only typer and the pure config dataclasses load at import, so `--help` is instant; torch and
TransformerLens load inside the command that needs them. Bad input: one line, exit code 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from .config import DEVICES, SCHEDULES, ModelConfig, TrainConfig
from .errors import SelectorLensError
from .task import DIRECTIONS, SelectorTask

app = typer.Typer(
    help="Watch a transformer go from the marginal P(A|B) to the conditional P(A|B,z).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)



@app.callback()
def _root() -> None:
    """Watch a transformer go from the marginal P(A|B) to the conditional P(A|B,z)."""


_D = TrainConfig()
_T = SelectorTask()


@app.command(
    epilog="Examples:\n\n  selector-lens train --k 10 --n-bases 1000 --seed 42 --steps 6000 --out checkpoints/k10\n\n"
    "  selector-lens train --out checkpoints/k10 --resume   # continue a killed run"
)
def train(
    k: int = typer.Option(_T.k, help="Targets per base (ambiguity K)."),
    n_bases: int = typer.Option(_T.n_bases, help="Distinct base strings; D = n_bases x K."),
    seed: int = typer.Option(_D.seed, help="Seed of the data and of the model/data order."),
    steps: int = typer.Option(_D.steps, help="Maximum optimizer steps."),
    out: Optional[Path] = typer.Option(None, help="Run directory [default: checkpoints/<name>]."),
    direction: str = typer.Option(_T.direction, help=f"One of {', '.join(DIRECTIONS)}."),
    z_length: int = typer.Option(_T.z_length, help="Selector length (1..4)."),
    unique_first_char: bool = typer.Option(_T.unique_first_char, help="K targets of a base start differently."),
    batch_size: int = typer.Option(_D.batch_size),
    lr: float = typer.Option(_D.lr),
    weight_decay: float = typer.Option(_D.weight_decay),
    grad_clip: float = typer.Option(_D.grad_clip, help="Max gradient norm; 0 turns clipping off."),
    schedule: str = typer.Option(_D.schedule, help=f"One of {', '.join(SCHEDULES)}."),
    warmup_steps: int = typer.Option(_D.warmup_steps),
    eval_every: int = typer.Option(_D.eval_every, help="Steps between evaluations."),
    ckpt_every: int = typer.Option(_D.ckpt_every, help="Steps between weight checkpoints."),
    eval_groups: str = typer.Option(_D.eval_groups, help="'auto' (<= 200 groups), 'all', or a count."),
    early_stop: bool = typer.Option(_D.early_stop, help="Stop once the candidate loss stays < 0.05 log K."),
    n_layers: int = typer.Option(ModelConfig.n_layers, help="Model size (paper defaults)."),
    n_heads: int = typer.Option(ModelConfig.n_heads),
    d_model: int = typer.Option(ModelConfig.d_model),
    d_head: int = typer.Option(ModelConfig.d_head),
    d_mlp: int = typer.Option(ModelConfig.d_mlp),
    device: str = typer.Option(_D.device, help=f"One of {', '.join(DEVICES)}."),
    resume: bool = typer.Option(False, help="Continue the run in --out from its last checkpoint."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
):
    """Train a HookedTransformer on the selector task with dense evaluation and checkpoints."""
    import time

    from .trainer import train as run_training

    cfg = TrainConfig(
        task=SelectorTask(k=k, n_bases=n_bases, z_length=z_length, direction=direction,
                          unique_first_char=unique_first_char, seed=seed),
        model=ModelConfig(n_layers=n_layers, n_heads=n_heads, d_model=d_model, d_head=d_head, d_mlp=d_mlp),
        steps=steps, batch_size=batch_size, lr=lr, weight_decay=weight_decay, grad_clip=grad_clip,
        schedule=schedule, warmup_steps=warmup_steps, eval_every=eval_every, ckpt_every=ckpt_every,
        eval_groups=eval_groups, early_stop=early_stop, seed=seed, device=device,
    )
    t0 = time.perf_counter()
    run = run_training(cfg, out=out, resume=resume, progress=not json_out)
    info = run.info
    summary = {"run": str(run.path), "status": info["status"], **info["summary"],
               "session_wall_s": time.perf_counter() - t0}
    if json_out:
        print(json.dumps(summary))
    else:
        _print_summary(summary)


def _print_summary(s: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    def fmt(v, spec=".4g"):
        return "-" if v is None else format(v, spec) if isinstance(v, float) else str(v)

    table = Table(title=f"{s['run']} ({s['status']})", show_header=False)
    table.add_row("plateau height / log K", fmt(s["plateau_over_log_k"], ".3f"))
    table.add_row("tau (cand. loss < 0.5 log K)", fmt(s["tau"]) if s["tau"] is not None else "no transition")
    table.add_row("final step", fmt(s["final_step"]))
    table.add_row("final candidate loss", fmt(s["final_candidate_loss"]))
    table.add_row("final candidate accuracy", fmt(s["final_candidate_acc"], ".3f"))
    table.add_row("final z-shuffle gap (nats)", fmt(s["final_dz"], ".3f"))
    table.add_row("wall time (s)", fmt(s["wall_time_s"], ".1f"))
    Console().print(table)


def main() -> None:
    """Console-script entry: bad input becomes one line on stderr and exit code 2."""
    try:
        app()
    except SelectorLensError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
