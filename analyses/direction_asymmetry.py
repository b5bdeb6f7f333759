"""Claim 6: learning (B, z) -> A is faster than the one-to-one reverse A -> B (paper: 1.7x-4.4x).

    python analyses/direction_asymmetry.py --scale cpu [--executor local|ray|batched] [--root DIR]

Both directions train on the same strings (the generator does not depend on the direction) with
the same model and optimiser, over several seeds. Waiting time, defined identically for both:
the first eval step with teacher-forced token accuracy (target tokens + EOS) >= 0.95
(`transition.solve_time`). Writes DIR/asymmetry.json and DIR/asymmetry.html.
The study lives in `selector_lens.paper.studies.asymmetry`.
"""

import sys

from selector_lens.cli import main

if __name__ == "__main__":  # the same command line as `selector-lens study asymmetry`
    main(["study", "asymmetry", *sys.argv[1:]])
