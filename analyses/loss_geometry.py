"""Claim 5: the plateau is an anisotropic saddle; gradient noise lies along its steep directions.

    python analyses/loss_geometry.py --scale cpu [--root DIR]

On the seeds study's first run, at pre / mid / post / final: λmax (power iteration), λmin and the
top eigenvectors (Lanczos) of the training loss's Hessian on a fixed, seeded subsample (cpu: 512
examples; the size is reported: estimates depend on it), their ratio, and the share of minibatch
gradient noise along the top directions vs a random subspace. Writes DIR/geometry.json and .html
(`selector_lens.paper.studies.geometry`; one checkpoint: `selector-lens landscape`).
"""

import sys

from selector_lens.cli import main

if __name__ == "__main__":  # the same command line as `selector-lens study geometry`
    main(["study", "geometry", *sys.argv[1:]])
