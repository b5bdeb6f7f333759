"""Claim 4: gradient noise holds the model on the plateau (lr and batch-size sweeps).

    python analyses/noise.py --scale cpu [--executor local|ray|batched] [--workers N] [--root DIR]

Two sweeps under DIR: `lr/` (batch fixed at 128, so equal steps are equal examples processed) and
`batch_size/` (lr fixed; τ compared in examples processed, τ x batch). Paper (K=20, D=20k): τ grows
3.6x over lr 3e-4..5e-3 (~7x) and the highest lr never escapes; batch 64 vs 512 delays escape ~1.8x
at equal examples. `--scale cpu`: K=5, D=2000, lr 3e-4..5e-3, batch 32..256. Writes DIR/noise.json
and DIR/noise.html (`selector_lens.paper.studies.noise`).
"""

import sys

from selector_lens.cli import main

if __name__ == "__main__":  # the same command line as `selector-lens study noise`
    main(["study", "noise", *sys.argv[1:]])
