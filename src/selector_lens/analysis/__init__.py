"""The analysis wing: named analyses of a run's checkpoints (attention, ablation, patching,
routing, logit lens, weight trajectory, representations, loss landscape), each on the store's
per-checkpoint helper, and `tables.analyze`, which runs the set a dashboard draws."""
