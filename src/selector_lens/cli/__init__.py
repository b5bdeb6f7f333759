"""The `selector-lens` command line: parse, call one API function, print. The app and what its
commands share are in `app`; the commands, by wing, in `training`, `analysis`, `stages` and `paper`."""

from selector_lens.cli import analysis, paper, stages, training  # noqa: F401  (each registers its commands)
from selector_lens.cli.analysis import ablate_head_main
from selector_lens.cli.app import app, in_order, main

# the order `--help` lists the commands in (and their examples run in): a run first, what reads
# it, sweeps, the paper's, and last `prune`, which thins what the others read
in_order(app, ["train", "branch", analysis, stages, "sweep", "fit", paper, "prune"])

__all__ = ["main", "app", "ablate_head_main"]
