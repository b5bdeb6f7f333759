"""Claim 3: groups do not learn one at a time; they cross together, around τ.

    python analyses/collective_transition.py --scale cpu [--root DIR]

Trains (or reuses) the seeds study's runs (cpu: K=5, n_bases=800, seeds 42, 1, 2), then reads the
per-group accuracy stored at every eval: fraction of groups solved (> 50% of their K examples) at
τ/2, τ, 1.5τ; the 10%-90% crossing window over τ, against ~0.8 x the span for group-by-group
learning. Writes DIR/collective.json and DIR/collective.html (`selector_lens.paper.studies.collective`).
"""

import sys

from selector_lens.cli import main

if __name__ == "__main__":  # the same command line as `selector-lens study collective`
    main(["study", "collective", *sys.argv[1:]])
