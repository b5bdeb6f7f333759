"""selector-lens: watch a transformer go from a marginal to a conditional solution.

Names are imported lazily so `import selector_lens` (and the CLI's --help) stays instant;
torch and TransformerLens load on first use.
"""

__version__ = "0.1.0"

_EXPORTS = {
    "SelectorTask": "task",
    "TaskData": "task_data",
    "ModelConfig": "config",
    "TrainConfig": "config",
    "SelectorLensError": "errors",
    "build_model": "model",
    "train": "trainer",
    "Run": "runs",
    "evaluate": "metrics",
    "make_eval_set": "metrics",
    "tau": "transition",
    "CheckpointSeries": "runs",
    "attention_to_z": "attention",
    "attention_patterns": "attention",
    "ablate_heads": "interventions.ablation",
    "ablate_each_head": "interventions.ablation",
    "head_ablation": "interventions.ablation",
    "patch": "interventions.patching",
    "patch_series": "interventions.patching",
    "z_corruption": "interventions.patching",
    "logit_diff": "interventions.patching",
    "normalized_logit_diff": "interventions.patching",
    "find_routing_head": "routing",
    "cascade": "routing",
    "logit_lens": "lens",
    "weight_trajectory": "trajectory",
    "representation_stats": "representations",
    "analyze": "run_tables",
    "run_dashboard": "run_tables",
    "training_set_ablation": "interventions.ablation",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'selector_lens' has no attribute {name!r}")
