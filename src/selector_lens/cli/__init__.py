"""The `selector-lens` command line (`commands`): parse, call one API function, print."""

from selector_lens.cli.commands import ablate_head_main, app, main

__all__ = ["main", "app", "ablate_head_main"]
