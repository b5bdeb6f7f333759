"""The paper's claims as studies (docs/science.md section 4), and the one-command `reproduce` report.

Every run a scale needs is listed in `presets` and trained once, into `<root>/runs/<name>`
(resumable: finished runs are reused; a run two studies need is shared). Each study then
measures, writes `<root>/<study>/<name>.json` and `.html`, and returns a `Study`: its numbers, its
figures, and one `Claim` row per claim it tests (paper, ours, verdict, settings). Scales: `cpu`
(CPU-sized), `paper` (the paper's settings, hours: `reproduce --plan` prices it)
and `tiny` (the test suite's seconds-long version; its verdicts mean nothing).

The `seeds` study (several seeds of one config) feeds claims 1 (marginal first), 3 (collective
transition), 5 (loss geometry, on its first seed) and 7 (cascade). Claim 8 (`alternatives`) has
one sub-claim per alternative mechanism: gradient cancellation from its own runs (`sharing`),
the others from claims 3, 4 and 5, the sweeps' runs and the first seed's instruments.

Layout: `base` (Setup: where the runs live; Claim, Study; the claims' paper texts), `seeds`,
`paper_code`, `sweeps` and `alternatives` (each study measures its table and writes its sentence), `report`
(`reproduce`, `run_study`). Each verdict rule is a pure function in `selector_lens.verdicts`; each
study's figure is drawn from its table in `viz.study_figures`; the page is `viz.report`.
"""

from selector_lens.paper.presets import GEOMETRY
from selector_lens.paper.studies.alternatives import alternatives, sharing
from selector_lens.paper.studies.base import (
    CLAIMS,
    SOLVED_TOKEN_ACC,
    Claim,
    Setup,
    Study,
    collective_runs,
    geometry_runs,
    pending,
    seed_runs,
)
from selector_lens.paper.studies.paper_code import PAPER_HEAD_TABLE, PARITY_STEPS, parity_study
from selector_lens.paper.studies.report import (
    SEED_STUDIES,
    STUDY_CLAIM,
    STUDY_FUNCS,
    reproduce,
    run_study,
)
from selector_lens.paper.studies.seeds import cascade_study, collective, geometry, marginal_first
from selector_lens.paper.studies.sweeps import asymmetry, noise, scaling

__all__ = [
    "CLAIMS",
    "GEOMETRY",
    "PAPER_HEAD_TABLE",
    "PARITY_STEPS",
    "SEED_STUDIES",
    "SOLVED_TOKEN_ACC",
    "STUDY_CLAIM",
    "STUDY_FUNCS",
    "Claim",
    "Setup",
    "Study",
    "alternatives",
    "asymmetry",
    "cascade_study",
    "collective",
    "geometry",
    "collective_runs",
    "geometry_runs",
    "marginal_first",
    "noise",
    "parity_study",
    "pending",
    "reproduce",
    "run_study",
    "scaling",
    "seed_runs",
    "sharing",
]
