"""Claim 7: the internal cascade across seeds (routing head, its onset, Δz's lead over τ).

    python analyses/cascade.py --scale cpu [--root DIR]

On each of the seeds study's runs: the routing head (largest mean-ablation increase of the
candidate loss at post = 1.5τ, never assumed), the onset of its attention to z, the onset of
Δz (> 0.1 nats), τ, the leads as fractions of τ (paper: ~0.5), the head's mean ablation at pre /
mid / post, and the best single head kept alone (sufficiency). Writes DIR/cascade.json and .html
(`selector_lens.paper.studies.cascade_study`).
"""

import sys

from selector_lens.cli import main

if __name__ == "__main__":  # the same command line as `selector-lens study cascade`
    main(["study", "cascade", *sys.argv[1:]])
