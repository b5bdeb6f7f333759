"""Interventions on a HookedTransformer: head ablation and activation patching."""
