"""What a run's dashboard shows, gathered once and kept with the run (`selector-lens analyze`).

`gather` collects every table the dashboard draws: the metrics (no checkpoint needed), the head
ablations at pre / mid / post and the routing head, attention to z, activation patching over
the checkpoints, the weight trajectory, the logit lens, the representation statistics and the
attention explorer's patterns.
Each table that needs checkpoints goes through the analysis store (`store.py`), so the first
call computes and stores it and later calls read it: `analyze` after training makes the
dashboard a matter of drawing. `run_dashboard` is gather, then `viz.dashboard.draw_run`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from selector_lens.errors import SelectorLensError


@dataclass
class RunTables:
    """Everything the run dashboard draws; None where the run cannot give it (see `notes`)."""

    name: str
    summary: list[tuple[str, object]]  # (label, value) rows of the header table
    still_training: str | None  # a note when the run has not ended
    metrics: object  # DataFrame, one row per evaluation
    log_k: float
    k: int
    has_z: bool
    has_candidates: bool
    tau: int | None
    phases: dict[str, int] | None
    ablation: object = None  # ablate_each_head at pre / mid / post
    routing: str | None = None  # the most necessary head at post
    cascade: dict | None = None  # `routing.cascade` of that head: onsets of attention and Δz
    attention: object = None  # attention_to_z (from metrics.jsonl)
    patching: object = None  # patch_series at resid_pre
    token_labels: list[str] | None = None  # the example's tokens (the patching axes)
    weights: object = None  # weight_trajectory
    lens: object = None  # logit_lens
    representations: object = None  # representation_stats
    landscape: object = None  # the landscape the store keeps (never computed here: minutes)
    llc: object = None  # the LLC per checkpoint the store keeps (never computed here)
    attribution: object = None  # attribution patching of head outputs the store keeps
    explorer: dict | None = None  # {step: [example, layer, head, query, key]}
    examples: list[int] = field(default_factory=list)  # the explorer's, `example` first
    example_tokens: list[list[str]] = field(default_factory=list)  # each one's tokens
    z_positions: list[int] = field(default_factory=list)  # keys the explorer outlines
    query_pos: int | None = None  # the query that predicts a1, outlined too
    branches: list[dict] = field(default_factory=list)  # children: name, step, label, metrics
    notes: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # time spent on each table


def _branch_curves(child) -> dict:
    """A child run's curves from its branch step on, and what it changed (a legend label)."""
    record = child.info["branch"]
    changed = [f"{k}={v}" for k, v in record.get("changes", {}).items()]
    changed += ["reset-adam"] * bool(record.get("reset_adam"))
    for kind in ("freeze", "reinit", "ablate"):
        changed += [f"{kind} {h}" for h in record.get(f"{kind}_heads", [])]
    changed += [f"z {record['z']}"] if record.get("z") else []
    heads = [h for kind in ("freeze", "reinit", "ablate") for h in record.get(f"{kind}_heads", [])]
    return {
        "name": child.path.name,
        "step": record["step"],
        "label": ", ".join(changed) or "no change",
        "heads": heads,
        "rows": [r for r in child.metric_rows() if r["step"] >= record["step"]],
    }


def gather(
    run,
    ablation: bool = True,
    patch_steps: int = 8,
    example: int = 0,
    explorer_steps: int = 12,
    explorer_count: int = 16,
    mode: str = "mean",
    lens_steps: int = 8,
    recompute: bool = False,
) -> RunTables:
    """The dashboard's tables for `run`, from its store where they are kept (computed and stored
    where they are not; `recompute=True` computes all). Parts that need what the run lacks (a
    transition, z, candidates, weights) are left out with a note saying why."""
    from selector_lens.analysis.ablation import ablate_each_head
    from selector_lens.analysis.attention import (
        attention_to_z,
        example_patterns,
        explorer_examples,
    )
    from selector_lens.analysis.patching import patch_series
    from selector_lens.analysis.routing import cascade, most_necessary_head
    from selector_lens.runs.steps import thin
    from selector_lens.task.vocab import decode

    rows = run.metric_rows()
    if not rows:
        raise SelectorLensError(f"{run.path} has no metrics yet: nothing to show")
    cfg, task = run.config, run.config.task
    examples = explorer_examples(task.n_examples, example, explorer_count)
    tau = run.tau()
    last = rows[-1]
    summary = [
        (
            "task",
            f"{task.direction}, K={task.k}, n_bases={task.n_bases} (D={task.n_examples}), seed {cfg.seed}",
        ),
        (
            "training",
            f"lr {cfg.lr:g}, batch {cfg.batch_size}, {cfg.steps} steps max; status {run.status}",
        ),
        ("last eval step", last["step"]),
        ("τ (candidate loss < 0.5 log K)", tau if tau is not None else "no transition (yet)"),
        ("final candidate accuracy", last.get("candidate_acc")),
        ("final Δz (nats)", last.get("dz")),
    ]
    still = None
    if run.status in ("running", "interrupted"):
        still = (
            f"This run is still training (or was killed): showing the {len(rows)} evaluations "
            f"and {len(run.steps)} checkpoints written so far."
        )
    phases = run.phases() if tau is not None and run.steps else None
    record = run.info.get("branch")
    if record:
        summary.append(("branched from", f"{record['parent']} at step {record['step']}"))
    t = RunTables(
        run.path.name,
        summary,
        still,
        run.metrics,
        task.log_k,
        task.k,
        task.has_z,
        task.has_candidates,
        tau,
        phases,
        examples=examples,
        z_positions=task.z_positions,
        query_pos=task.first_target_pos,
        branches=[_branch_curves(c) for c in run.children()],
    )
    clock = time.perf_counter

    def part(name: str, compute):
        """One table, timed. A published run serves what its store kept and has no weights to
        compute the rest from: a missing table is then a note, not an error."""
        t0 = clock()
        try:
            return compute()
        except SelectorLensError as e:
            if run.has_weights:
                raise
            t.notes.append(f"{name}: not stored with this published run ({e})")
            return None
        finally:
            t.seconds[name] = clock() - t0

    if ablation and phases and task.has_z:
        steps = sorted({phases[p] for p in ("pre", "mid", "post")})
        t.ablation = part(
            "ablation", lambda: ablate_each_head(run, steps, mode, recompute=recompute)
        )
        if t.ablation is not None:
            post = t.ablation[t.ablation.step == phases["post"]]
            head = most_necessary_head(post)[0]
            t.routing = "L{}H{}".format(*head)
            t.cascade = cascade(run, head=head)  # onsets and leads: from metrics.jsonl
    elif ablation:
        t.notes.append(
            "head ablation: needs a run with z that has transitioned (phases come from τ)"
        )
    if task.has_z:
        t.attention = attention_to_z(run)
    t.example_tokens = [decode(run.task_data.rows[e]) for e in examples]
    t.token_labels = t.example_tokens[0]
    if task.direction == "bz_to_a" and task.k > 1 and run.steps and patch_steps > 0:
        t.patching = part(
            "patching",
            lambda: patch_series(
                run, "resid_pre", thin(run.steps, patch_steps), recompute=recompute
            ),
        )
    else:
        t.notes.append("activation patching: needs a bz_to_a run with K >= 2 and checkpoints")
    if run.steps:
        from selector_lens.analysis.lens import logit_lens
        from selector_lens.analysis.representations import representation_stats
        from selector_lens.analysis.trajectory import weight_trajectory

        t.weights = part("weights", lambda: weight_trajectory(run, recompute=recompute))
        some = thin(run.steps, lens_steps)
        if task.has_candidates:
            t.lens = part("logit_lens", lambda: logit_lens(run, some, recompute=recompute))
        if task.k > 1:
            t.representations = part(
                "representations", lambda: representation_stats(run, some, recompute=recompute)
            )
        t.landscape = _stored_landscape(run)
        if t.landscape is None:
            t.notes.append(
                f"loss landscape: none stored (`selector-lens landscape --run {run.path}` adds "
                "it, minutes at the paper's scale)"
            )
        t.llc, t.attribution, missing = stored_stages(run)
        t.notes += missing
        found = part(
            "explorer",
            lambda: example_patterns(run, thin(run.steps, explorer_steps), examples, recompute),
        )
        if found is not None and found[1]:
            t.examples, t.explorer = found
            t.example_tokens = t.example_tokens[: len(t.examples)]
    return t


def _largest_stored(run, analysis: str, version: str, keep=lambda params: True, size=None):
    """The stored table of `analysis` (any parameters `keep` accepts) over the most checkpoints,
    ties broken by `size(params)` (None if none): for the tables the dashboard shows but never
    computes (minutes each)."""
    import pandas as pd

    from selector_lens.runs.store import stored_tables

    ours = [
        (len({r["step"] for r in rows}), size(params) if size else 0, rows)
        for params, rows in stored_tables(run, analysis, version)
        if keep(params)
    ]
    return pd.DataFrame(max(ours, key=lambda x: x[:2])[2]) if ours else None


def _stored_landscape(run):
    """The Lanczos landscape over the most checkpoints the store keeps, the largest sample
    among those."""
    from selector_lens.analysis.landscape import LANDSCAPE_VERSION

    return _largest_stored(
        run, "landscape", LANDSCAPE_VERSION, lambda p: "estimator" not in p, lambda p: p["sample"]
    )


def stored_stages(run) -> tuple[object, object, list[str]]:
    """The LLC and the head-output attribution the store keeps (each over the most checkpoints),
    and, where one of the two is kept, a note for the other naming the command that adds it
    (neither kept: no note; both are minutes at the paper's scale, asked for on purpose)."""
    from selector_lens.analysis.attribution import ATTRIBUTION_VERSION
    from selector_lens.analysis.llc import LLC_VERSION

    llc = _largest_stored(run, "llc", LLC_VERSION, size=lambda p: p["chains"] * p["draws"])
    attribution = _largest_stored(
        run, "attribution", ATTRIBUTION_VERSION, lambda p: p["site"] == "z"
    )
    notes = [
        f"{name}: none stored (`selector-lens {cmd} --run {run.path}` adds it)"
        for name, cmd, table in (
            ("the local learning coefficient", "llc --every 4", llc),
            ("attribution patching", "attribute", attribution),
        )
        if table is None
    ]
    return llc, attribution, notes if len(notes) < 2 else []


def gather_task(
    run,
    ablation: bool = True,
    patch_steps: int = 8,
    example: int = 0,
    explorer_steps: int = 12,
    explorer_count: int = 16,
    max_steps: int = 60,
    recompute: bool = False,
) -> dict:
    """What any task's dashboard shows (`viz.dashboard.task_dashboard`), from the store where it
    is kept: the metrics, attention to the positions of interest and the corruption gap at up to
    `max_steps` checkpoints, every head ablated at the phases, head outputs patched at
    `patch_steps` checkpoints, the explorer's patterns. A part the task cannot give is a note;
    `seconds` times each part."""
    import pandas as pd

    from selector_lens.analysis.ablation import ablate_each_head
    from selector_lens.analysis.attention import (
        attention_to_positions,
        example_patterns,
        explorer_examples,
    )
    from selector_lens.analysis.patching import corruption_gap, patch_series
    from selector_lens.runs.steps import thin
    from selector_lens.runs.transition import task_summary
    from selector_lens.task.protocol import headline

    task, cfg, rows = run.config.task, run.config, run.metric_rows()
    if not rows:
        raise SelectorLensError(f"{run.path} has no metrics yet: nothing to show")
    tau, steps = run.tau(), run.steps
    summary = task_summary(task, rows)
    options = ", ".join(f"{k} {v}" for k, v in vars(task).items())
    t = {
        "tau": tau,
        "metrics": pd.DataFrame(rows),
        "scalar": {m: d for m, d in task.metrics.items() if not isinstance(rows[-1].get(m), list)},
        "summary": [
            ("task", f"{task.name}: {options}"),
            ("model", ", ".join(f"{k} {v}" for k, v in vars(cfg.model).items())),
            ("training", f"lr {cfg.lr:g}, batch {cfg.batch_size}, {cfg.steps} steps; {run.status}"),
            ("transition", tau if tau is not None else "none (yet)"),
            ("transition means", (summary.get("tau_definition") or "").strip()),
            *(
                (k, v)
                for k, v in summary.items()
                if k.startswith("final_") and not isinstance(v, list)
            ),
        ],
        "notes": [] if steps else ["no checkpoints: only the metrics"],
        "seconds": {},
        "ranked_by": f"delta_{headline(task)}",
        "phases": dict((label or str(s), s) for label, s in run.labelled_steps()) if steps else {},
    }

    def part(key, compute):
        t0 = time.perf_counter()
        try:
            t[key] = compute()
        except SelectorLensError as e:  # the task cannot give it (or the run has no weights)
            t["notes"].append(f"{key}: {e}")
        t["seconds"][key] = time.perf_counter() - t0

    if steps:
        shown = thin(steps, max_steps)
        part("attention", lambda: attention_to_positions(run, shown, recompute))
        part("gap", lambda: corruption_gap(run, shown, recompute=recompute))
        if ablation:
            at = sorted(set(t["phases"].values()))
            part("ablation", lambda: ablate_each_head(run, at, recompute=recompute))
        if patch_steps:
            chosen = thin(steps, patch_steps)
            part("patching", lambda: patch_series(run, "z", chosen, recompute=recompute))
        if explorer_steps:

            def explorer():
                chosen = explorer_examples(task.n_examples, example, explorer_count)
                shown_steps = thin(steps, explorer_steps)
                chosen, patterns = example_patterns(run, shown_steps, chosen, recompute)
                tokens = run.task_data.tokens[chosen].tolist()
                return patterns, chosen, [[str(x) for x in r] for r in tokens]

            part("explorer", explorer)
        t["llc"], t["attribution"], missing = stored_stages(run)
        t["notes"] += missing
    return t


def analyze(run, recompute: bool = False) -> dict:
    """Compute and store the standard set a dashboard (and `cascade`) reads: the routing head
    (every head ablated at post), the ablations at pre / mid / post, patching, the logit lens,
    the attention explorer's checkpoints (another task: what `gather_task` reads). Returns the
    seconds each part took."""
    from selector_lens.analysis.routing import find_routing_head

    if run.config.task.name != "selector":
        return gather_task(run, recompute=recompute)["seconds"]

    t = gather(run, recompute=recompute)
    seconds = dict(t.seconds)
    if t.phases and t.has_z:
        t0 = time.perf_counter()
        find_routing_head(run, t.phases["post"])  # its sufficiency table too
        seconds["routing"] = time.perf_counter() - t0
    return seconds


def task_result(run) -> dict:
    """What a task's published summary.json holds, from its stored tables: modular addition's
    grokking gap (its rows); induction's phase change, its heads named at the last checkpoint
    by attention, ablation and patching (`InductionTask.phase_change`)."""
    from selector_lens.analysis.ablation import ablate_each_head
    from selector_lens.analysis.attention import attention_to_positions
    from selector_lens.analysis.patching import patch_series

    task, rows = run.config.task, run.metric_rows()
    if hasattr(task, "grokking"):
        return task.grokking(rows)
    if not hasattr(task, "phase_change"):
        raise SelectorLensError(f"the {task.name} task has no published summary")
    last = [run.steps[-1]]
    return task.phase_change(
        rows,
        attention_to_positions(run, last),
        ablate_each_head(run, last),
        patch_series(run, "z", last),
    )
