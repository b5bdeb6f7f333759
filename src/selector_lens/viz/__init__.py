"""Plotly figures from the analysis tables, the attention explorer (an HTML block), and the
self-contained HTML dashboards."""

from selector_lens.viz.explorer import attention_explorer
from selector_lens.viz.figures import (
    ablation_heatmaps,
    attention_heatmap,
    branch_overlay,
    cascade_timeline,
    dz_curve,
    group_transition,
    landscape_curves,
    logit_lens_curves,
    loss_curves,
    patching_heatmap,
    representation_curves,
    tau_vs_d,
    tau_vs_k,
    weight_trajectory_curves,
)
from selector_lens.viz.stages import stages_panel

__all__ = [
    "loss_curves",
    "dz_curve",
    "attention_heatmap",
    "group_transition",
    "ablation_heatmaps",
    "patching_heatmap",
    "tau_vs_d",
    "tau_vs_k",
    "logit_lens_curves",
    "weight_trajectory_curves",
    "representation_curves",
    "cascade_timeline",
    "branch_overlay",
    "landscape_curves",
    "attention_explorer",
    "stages_panel",
]
