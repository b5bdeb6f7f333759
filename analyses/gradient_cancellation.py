"""Claim 8, gradient cancellation: τ against the number of selector super-groups G.

    python analyses/gradient_cancellation.py --scale cpu [--executor local|ray|batched] [--root DIR]

G super-groups of bases, each with its own K selectors (`SelectorTask(z_groups=G)`), at fixed K
and D; G = 1 is the ordinary task. If gradients from the groups that share a z cancelled and
held the model on the plateau, τ would grow about linearly in G; the paper measures an exponent
of ~0.02. Writes DIR/sharing/sharing.json and .html. The study lives in
`selector_lens.paper.studies.sharing`; the report reads it as a sub-claim of claim 8.
"""

import sys

from selector_lens.cli import main

if __name__ == "__main__":  # the same command line as `selector-lens study sharing`
    main(["study", "sharing", *sys.argv[1:]])
