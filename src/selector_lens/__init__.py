"""selector-lens: watch a transformer go from a marginal to a conditional solution.

Names are imported lazily so `import selector_lens` (and the CLI's --help) stays instant;
torch and TransformerLens load on first use.
"""

__version__ = "0.1.0"

_EXPORTS = {
    "SelectorTask": "task.selector",
    "TaskData": "task.data",
    "ModelConfig": "config",
    "TrainConfig": "config",
    "SelectorLensError": "errors",
    "build_model": "model.adapter",
    "train": "training.trainer",
    "branch": "training.branch",
    "branches": "training.branch",
    "Run": "runs.run",
    "evaluate": "model.metrics",
    "make_eval_set": "task.eval_set",
    "tau": "runs.transition",
    "CheckpointSeries": "runs.run",
    "attention_to_z": "analysis.attention",
    "attention_patterns": "analysis.attention",
    "ablate_heads": "analysis.ablation",
    "ablate_each_head": "analysis.ablation",
    "head_ablation": "analysis.ablation",
    "patch": "analysis.patching",
    "patch_series": "analysis.patching",
    "z_corruption": "analysis.patching",
    "logit_diff": "analysis.patching",
    "normalized_logit_diff": "analysis.patching",
    "attention_to_positions": "analysis.attention",
    "corruption_gap": "analysis.patching",
    "attribute": "analysis.attribution",
    "attribution_patch": "analysis.attribution",
    "find_routing_head": "analysis.routing",
    "cascade": "analysis.routing",
    "logit_lens": "analysis.lens",
    "weight_trajectory": "analysis.trajectory",
    "representation_stats": "analysis.representations",
    "analyze": "analysis.tables",
    "run_dashboard": "viz.dashboard",
    "training_set_ablation": "analysis.ablation",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'selector_lens' has no attribute {name!r}")
