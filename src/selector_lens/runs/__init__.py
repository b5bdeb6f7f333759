"""The runs wing: a trained run on disk (`run.Run`), its directory layout (`rundir`), which
checkpoints an analysis reads (`steps`), the per-checkpoint analysis store (`store`), and τ and
the transition's other summaries (`transition`)."""
