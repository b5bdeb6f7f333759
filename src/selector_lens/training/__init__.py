"""The training wing: the trainer (one run or a batch of runs stepped together) and sweeps with
their executors."""
