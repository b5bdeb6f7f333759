"""When to evaluate: every `eval_every` steps (dense), or only where something moves (adaptive).

A full evaluation costs ~10 training steps on the paper's model, so evaluating every 50 steps
adds ~20 % to training, most of it on a plateau where nothing changes. The adaptive cadence
evaluates on the dense grid only (multiples of `eval_every`, so every transition step it reports
is one the dense cadence could report). A grid step *moves* when

- the probe: the mean training loss over the last `eval_every` steps (computed anyway) differs
  from the same window's mean before the last evaluation by more than PROBE_REL of the first
  window's mean and PROBE_SE standard errors of the two means (the steps' own scatter); or
- the last two evaluations' headline metric (the task's `headline`, else the loss) differ by more
  than EVAL_REL of its step-0 value;

and the cadence evaluates at every grid step from one that moves until FLOOR grid steps in a row
have not (through a transition), while the early stop is counting evaluations (so the run stops
where the dense cadence would), at every FLOOR-th grid step (a floor on a plateau), step 0 and
the last step. The tolerances are shares of where the run started, not of where it is: a loss
decaying towards zero after its transition changes by a large share of itself and by little.
"""

from __future__ import annotations

import math

FLOOR = 4  # on a plateau: one evaluation every FLOOR x eval_every steps
PROBE_REL = 0.02  # the probe moved: its mean changed by 2 % of the first window's ...
PROBE_SE = 3.0  # ... and by 3 standard errors of the difference of the two windows' means
EVAL_REL = 0.02  # the last two evaluations' headline differ by 2 % of its step-0 value


class Cadence:
    """The adaptive cadence's state: the probe's open window, the window before the last
    evaluation, the first window's mean (the probe's scale) and the last grid step that moved.
    `state()` / `load()` carry it through a checkpoint, so a killed run resumes to the same
    evaluations."""

    def __init__(self, every: int, adaptive: bool, headline: str = "loss"):
        self.every, self.adaptive, self.headline = every, adaptive, headline
        self.window = [0.0, 0.0, 0]  # sum, sum of squares, count of this window's losses
        self.current: tuple[float, float] | None = None  # (mean, standard error), last window
        self.reference: tuple[float, float] | None = None  # the window before the last eval
        self.scale: float | None = None  # the first window's mean
        self.moved_at: int | None = None  # the last grid step that moved
        self.last_loss = math.nan  # the last step's (the progress bar shows it)

    def observe(self, step: int, loss: float) -> None:
        """One training step's loss; closes the window at each grid step."""
        self.last_loss = loss
        w = self.window
        w[0], w[1], w[2] = w[0] + loss, w[1] + loss * loss, w[2] + 1
        if step % self.every == 0:
            n = w[2]
            mean = w[0] / n
            var = max(w[1] / n - mean * mean, 0.0) * n / max(n - 1, 1)
            self.current = (mean, math.sqrt(var / n))
            self.scale = mean if self.scale is None else self.scale
            self.window = [0.0, 0.0, 0]

    def moves(self, rows: list[dict]) -> bool:
        """Has the probe or the evaluations moved (the rule above)?"""
        if self.current is None or self.reference is None:
            return True
        (m, se), (m0, se0) = self.current, self.reference
        gap = abs(m - m0)
        if gap > PROBE_REL * abs(self.scale) and gap > PROBE_SE * math.hypot(se, se0):
            return True
        if len(rows) >= 2:
            first, a, b = (r.get(self.headline) for r in (rows[0], rows[-2], rows[-1]))
            if all(isinstance(x, (int, float)) for x in (first, a, b)):
                return abs(b - a) > EVAL_REL * abs(first)
        return False

    def due(self, step: int, rows: list[dict], counting: bool) -> bool:
        """Evaluate at grid step `step`? `rows`: the evaluations so far; `counting`: the early
        stop is counting evaluations. Called once per grid step: it records whether the step
        moved (the hold of FLOOR grid steps counts from the last that did)."""
        if self.moves(rows):
            self.moved_at = step
        if not self.adaptive or counting or step % (FLOOR * self.every) == 0:
            return True
        return self.moved_at is not None and step - self.moved_at < FLOOR * self.every

    def evaluated(self) -> None:
        """An evaluation was taken: the probe's reference is now the window before it."""
        self.reference = self.current

    def state(self) -> dict:
        keep = ("window", "current", "reference", "scale", "moved_at")
        return {k: getattr(self, k) for k in keep}

    def load(self, state: dict | None) -> None:
        if state:
            self.window = list(state["window"])
            for k in ("current", "reference"):
                setattr(self, k, tuple(state[k]) if state[k] else None)
            self.scale, self.moved_at = state["scale"], state["moved_at"]
