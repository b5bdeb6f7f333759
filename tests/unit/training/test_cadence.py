"""The adaptive evaluation cadence's rule, grid step by grid step, on hand-made loss traces."""

import pytest

from selector_lens.training.cadence import EVAL_REL, FLOOR, PROBE_REL, Cadence

EVERY = 10


def scatter(level: float) -> list[float]:
    """One window of training losses at `level`, with a little scatter."""
    return [level + 0.01 * (-1) ** i for i in range(EVERY)]


def taken(levels, headline=None, counting=False, adaptive=True) -> list[int]:
    """The grid steps evaluated over one window per level (step 0 is evaluated by the trainer);
    `headline(step)`: the evaluation's headline value there (default: constant)."""
    c = Cadence(EVERY, adaptive=adaptive)
    rows, out, step = [{"step": 0, "loss": headline(0) if headline else 2.0}], [], 0
    for level in levels:
        for loss in scatter(level):
            step += 1
            c.observe(step, loss)
        if c.due(step, rows, counting):
            out.append(step)
            rows.append({"step": step, "loss": headline(step) if headline else 2.0})
            c.evaluated()
    return out


def test_a_plateau_is_evaluated_at_the_floor_only():
    steps = taken([2.0] * 3 * FLOOR)
    first = list(range(EVERY, FLOOR * EVERY + 1, EVERY))  # no reference yet: it moves
    floor = list(range(2 * FLOOR * EVERY, 3 * FLOOR * EVERY + 1, FLOOR * EVERY))
    assert steps == first + floor


def test_a_transition_is_followed_at_every_grid_step_until_it_holds_still():
    drop = 0.1  # per window: 5 % of the first window's mean (2.0), far beyond the scatter
    levels = [2.0] * 2 * FLOOR + [2.0 - drop * i for i in range(1, 6)] + [1.5] * 3 * FLOOR
    steps = taken(levels)
    start, end = 2 * FLOOR * EVERY + EVERY, (2 * FLOOR + 5) * EVERY  # the falling windows
    assert set(range(start, end + FLOOR * EVERY, EVERY)) <= set(steps)  # and FLOOR - 1 after
    quiet = [s for s in range(end + FLOOR * EVERY, len(levels) * EVERY + 1, EVERY)]
    assert [s for s in quiet if s in steps] == [s for s in quiet if s % (FLOOR * EVERY) == 0]


def test_a_drift_within_the_tolerance_is_a_plateau_however_certain():
    """A drift is measured from the last evaluation: under 2 % of the first window's mean in
    all, with many standard errors, it is a plateau; past it, the cadence follows."""
    n = 2 * FLOOR
    small = 2.0 * PROBE_REL * 0.9 / n  # per window: the whole drift stays under the tolerance
    levels = [2.0] * FLOOR + [2.0 - small * i for i in range(1, n + 1)]
    assert taken(levels)[FLOOR:] == [2 * FLOOR * EVERY, 3 * FLOOR * EVERY]  # the floor only
    levels = [2.0] * FLOOR + [2.0 - 4 * small * i for i in range(1, n + 1)]
    assert len(taken(levels)[FLOOR:]) > 2


def test_moving_evaluations_or_a_counting_stop_keep_it_dense():
    grid = set(range(EVERY, 3 * FLOOR * EVERY + 1, EVERY))
    moving = taken([2.0] * 3 * FLOOR, headline=lambda s: 3.0 - s * 3.0 * 2 * EVAL_REL / EVERY)
    assert set(moving) == grid
    still = taken([2.0] * 3 * FLOOR, headline=lambda s: 3.0 - s * 3.0 * EVAL_REL / 2 / EVERY)
    assert set(still) < grid
    assert set(taken([2.0] * 3 * FLOOR, counting=True)) == grid
    assert set(taken([2.0] * 3 * FLOOR, adaptive=False)) == grid  # dense


def test_the_state_carries_the_rule_through_a_checkpoint():
    a = Cadence(EVERY, adaptive=True)
    for step in range(1, 24):  # a window left open at step 23
        a.observe(step, 2.0 + 0.01 * step)
        if step % EVERY == 0 and a.due(step, [], False):
            a.evaluated()
    b = Cadence(EVERY, adaptive=True)
    b.load(a.state())
    for c in (a, b):
        for step in range(24, 31):
            c.observe(step, 1.5)
    assert a.state() == b.state()
    assert a.current[0] == pytest.approx((sum(2.0 + 0.01 * s for s in (21, 22, 23)) + 7 * 1.5) / 10)
    assert a.due(30, [], False) == b.due(30, [], False) is True
