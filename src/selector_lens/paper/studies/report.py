"""`reproduce`: every study at one scale (or from a published folder) into one report; and
one study on its own (`selector-lens study`)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from selector_lens.errors import SelectorLensError
from selector_lens.files import check_sums
from selector_lens.paper.presets import study_runs
from selector_lens.paper.studies.alternatives import alternatives, sharing
from selector_lens.paper.studies.base import (
    Setup,
    collective_runs,
    compare_runs,
    geometry_runs,
    pending,
    seed_runs,
)
from selector_lens.paper.studies.interventions import interventions
from selector_lens.paper.studies.paper_code import parity_study
from selector_lens.paper.studies.seeds import cascade_study, collective, geometry, marginal_first
from selector_lens.paper.studies.sweeps import asymmetry, noise, scaling
from selector_lens.runs.store import PUBLISHED, SUMS


# --- the report ----------------------------------------------------------------------------------
def reproduce(
    scale: str | None = "cpu",
    root=None,
    output="report.html",
    executor: str = "local",
    workers=None,
    from_=None,
    out=None,
    train: bool = True,
    only=None,
) -> dict:
    """Run (or reuse) every study at `scale` and write one HTML report of the paper's claims.

    `from_`: a published folder (`publish`): train nothing, read its finished runs and stored
    tables, and rebuild the report (its scale is read from the folder's report.json unless given).
    `train=False`: report on the finished runs under `root`, training nothing. `only`: the
    studies to measure (names as in `STUDY_CLAIM`); the others are reported as not run.
    Study files go to `out` (default: `root`, nowhere when rebuilding from a published folder).
    """
    from selector_lens.viz.report import write_report

    if from_ is not None:
        root = Path(from_)
        if not (root / "runs").is_dir():
            raise SelectorLensError(f"{root} holds no published runs (no runs/ folder)")
        check_sums(root, SUMS, PUBLISHED)  # a published value edited by hand is named, not read
        published = root / "report.json"
        if published.is_file() and scale is None:
            scale = json.loads(published.read_text())["scale"]
        setup = Setup(
            root,
            scale or "paper",
            executor,
            workers,
            train=False,
            out=None if out is None else Path(out),
        )
    else:
        root = Path(root) if root is not None else Path("checkpoints") / "reproduce" / scale
        setup = Setup(
            root, scale, executor, workers, train=train, out=Path(out) if out is not None else root
        )
    scale = setup.scale
    times, studies = {}, {}

    if only is not None and set(only) - set(STUDY_CLAIM):
        raise SelectorLensError(
            f"unknown studies {', '.join(sorted(set(only) - set(STUDY_CLAIM)))}; choose from "
            f"{', '.join(k for k in STUDY_CLAIM if k != 'training')}"
        )

    def timed(name, fn, *a):
        t = time.perf_counter()
        if only is not None and name not in only and name != "training":
            studies[name] = pending(
                name, STUDY_CLAIM[name], "not measured in this report (reproduce --only)"
            )
            times[name] = 0.0
            return studies[name]
        try:
            studies[name] = fn(*a)
        except SelectorLensError as e:  # e.g. a table that needs weights a published run left out
            if setup.train or from_ is None:
                raise
            why = str(e).replace(
                str(setup.root), setup.root.name
            )  # no machine's path in a published claim
            studies[name] = pending(
                name, STUDY_CLAIM[name], f"not measurable from the published files: {why}"
            )
        times[name] = time.perf_counter() - t
        return studies[name]

    t0 = time.perf_counter()
    timed("training", setup.train_all)  # every run first, in study order
    del studies["training"]
    runs = seed_runs(setup)
    seeds_dir = setup.dir("seeds")
    timed("marginal_first", marginal_first, runs, seeds_dir, scale)
    timed("collective", collective, SEED_STUDY_RUNS["collective"](setup, runs), seeds_dir, scale)
    timed("cascade", cascade_study, runs, seeds_dir, scale)
    timed(
        "geometry",
        geometry,
        SEED_STUDY_RUNS["geometry"](setup, runs),
        seeds_dir,
        scale,
        compare_runs(setup, runs),
    )
    timed(
        "parity",
        parity_study,
        runs,
        setup.runs("parity") if "parity" in study_runs(scale) else [],
        seeds_dir,
        scale,
        setup.runs("parity/k20") if "parity/k20" in study_runs(scale) else [],
    )
    timed("scaling", scaling, setup)
    timed("noise", noise, setup)
    timed("asymmetry", asymmetry, setup)
    timed("sharing", sharing, setup)
    timed("interventions", interventions, setup)
    timed("alternatives", alternatives, setup, studies, runs)
    wall = time.perf_counter() - t0
    shown = [n for n in studies if n != "sharing"]  # its claim and figure are claim 8's
    claims = [c for n in shown for c in studies[n].claims]
    claims.sort(key=lambda c: c.number)
    summary = {
        "scale": scale,
        "executor": executor,
        "wall_s": wall,
        "study_s": times,
        "claims": [c.__dict__ for c in claims],
    }
    if setup.out is not None:
        (setup.out / "report.json").write_text(json.dumps(summary, indent=1, default=str))

    order = [
        "marginal_first",
        "scaling",
        "collective",
        "noise",
        "geometry",
        "asymmetry",
        "cascade",
        "parity",
        "interventions",
        "alternatives",
    ]
    write_report(output, summary, claims, [studies[n] for n in order], root)
    summary["output"] = str(output)
    return summary


STUDY_FUNCS = {
    "scaling": scaling,
    "noise": noise,
    "asymmetry": asymmetry,
    "sharing": sharing,
    "interventions": interventions,
}
STUDY_CLAIM = {
    "training": 0,
    "marginal_first": 1,
    "scaling": 2,
    "collective": 3,
    "noise": 4,
    "geometry": 5,
    "asymmetry": 6,
    "cascade": 7,
    "parity": 7,
    "sharing": 8,
    "interventions": 7,
    "alternatives": 8,
}


SEED_STUDIES = {
    "marginal_first": marginal_first,
    "collective": collective,
    "cascade": cascade_study,
    "geometry": geometry,
}
SEED_STUDY_RUNS = {"collective": collective_runs, "geometry": geometry_runs}  # others: the seeds
SEED_STUDY_EXTRA = {"geometry": compare_runs}  # a second list of runs, where a study takes one


def run_study(
    name: str, scale: str, root=None, executor: str = "local", workers: int | None = None
) -> None:
    """One study on its own (`selector-lens study`, the analyses/ scripts). Its runs land where
    `reproduce` looks for them (checkpoints/reproduce/<scale>/runs), so the report reuses them
    and the studies share their runs."""
    if name not in SEED_STUDIES and name not in STUDY_FUNCS:
        raise SelectorLensError(
            f"unknown study {name!r}; choose one of {', '.join([*SEED_STUDIES, *STUDY_FUNCS])}"
        )
    root = Path(root) if root else Path("checkpoints") / "reproduce" / scale
    setup = Setup(root, scale, executor, workers, out=root)
    t = time.perf_counter()
    if name in SEED_STUDIES:
        runs = seeds = seed_runs(setup)
        if name in SEED_STUDY_RUNS:  # seeds and the scale's runs kept whole, or some of them
            runs = SEED_STUDY_RUNS[name](setup, seeds)
        extra = [SEED_STUDY_EXTRA[name](setup, seeds)] if name in SEED_STUDY_EXTRA else []
        study = SEED_STUDIES[name](runs, setup.dir("seeds"), scale, *extra)
    else:
        study = STUDY_FUNCS[name](setup)
    from selector_lens.viz.page import write_html

    where = setup.dir("seeds" if name in SEED_STUDIES else name)
    if study.figures:
        write_html(
            where / f"{study.name}.html",
            f"Claim {study.claims[0].number}: {study.claims[0].title}",
            study.figures,
        )
    for c in study.claims:
        print(
            f"claim {c.number} ({c.title}): {c.verdict}\n  paper: {c.paper}\n  ours:  {c.ours}\n  settings: {c.settings}"
        )
    print(f"wall time {time.perf_counter() - t:.0f} s; wrote {where / study.name}.json and .html")
