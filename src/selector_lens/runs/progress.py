"""Progress of long loops over checkpoints, in a terminal and out of one."""

from __future__ import annotations


def tracked(items: list, label: str, every_s: float = 5.0):
    """`items`, reporting progress on stderr: a rich bar on a terminal; elsewhere (a pipe,
    nohup, CI) a plain line when it starts, every `every_s` seconds with an estimate of the time
    left, and when it ends."""
    import sys
    import time

    from rich.console import Console

    console = Console(stderr=True)
    if console.is_terminal:
        from rich.progress import track

        yield from track(items, description=label, console=console, transient=True)
        return
    n, t0 = len(items), time.perf_counter()
    last = t0
    print(f"{label}: 0/{n}", file=sys.stderr, flush=True)
    for i, item in enumerate(items):
        now = time.perf_counter()
        if i and now - last >= every_s:
            left = (now - t0) / i * (n - i)
            print(f"{label}: {i}/{n}, ~{left:.0f} s left", file=sys.stderr, flush=True)
            last = now
        yield item
    print(f"{label}: {n}/{n} in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
