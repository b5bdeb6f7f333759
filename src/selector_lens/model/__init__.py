"""The model wing: the one TransformerLens adapter (build, save, load: `adapter`), the fast
forward it trains and evaluates through (`fused`), and dense evaluation (`metrics`)."""
