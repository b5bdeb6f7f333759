"""What each study of the paper's claims trains, per scale: one pool of runs, shared by name.

Every study lists its runs as flat options (the names `config.from_options` takes). A run two
studies need (the K = 10, n_bases = 1000, seed-42 baseline is the seeds study's first seed, a
point of τ vs D, of τ vs K at D = 10,000 and the forward run of the asymmetry study) is one run
directory, trained once, under `<root>/runs/<name>`. Pure Python (no torch): `reproduce --plan`
and the CLI read it instantly.

Scales: `cpu` (CPU-sized: 1/10 of the paper's D), `paper` (the paper's settings; `reproduce
--plan` prices it, its cuts are listed in `PAPER_CUTS`) and `tiny` (the test suite's seconds-long version; its verdicts
mean nothing).
"""

from __future__ import annotations

import math

from selector_lens.config import run_name
from selector_lens.errors import SelectorLensError

SCALES = ("cpu", "paper", "tiny")
TINY_MODEL = {"n_layers": 1, "n_heads": 2, "d_model": 32, "d_head": 16, "d_mlp": 64}
# a tiny run: seconds to train, a plateau it may not leave (the tiny scale tests plumbing)
TINY_RUN = {
    "k": 3,
    "n_bases": 12,
    "steps": 60,
    "eval_every": 10,
    "ckpt_every": 60,
    "lr": 3e-3,
    "batch_size": 16,
    **TINY_MODEL,
}

# the cpu scale's one-seed baseline (K = 5, D = 4,000), shared by the studies that start from it
CPU_RUN = {"k": 5, "n_bases": 800, "steps": 6000, "eval_every": 25, "ckpt_every": 50, "seed": 42}

DIRECTIONS = ["bz_to_a", "a_to_b", "az_to_b"]
ACC_STOP = {"early_stop_acc": [0.95], "early_stop_evals": [3]}
PAPER_BATCH_SCHEDULE = {
    "schedule": ["cosine"],
    "warmup_steps": [500],
    "cosine_steps": [10_000],
    "steps": [10_000],
}
PAPER_ASYM_SCHEDULE = {**PAPER_BATCH_SCHEDULE, "cosine_steps": [5000], "steps": [5000]}

# Base options and grids. A grid's points are its base updated by each combination of values.
PRESETS = {
    "seeds": {
        "cpu": {
            "base": {"k": 5, "n_bases": 800, "steps": 6000, "eval_every": 25, "ckpt_every": 50},
            "grid": {"seed": [42, 1, 2]},
        },
        "paper": {"base": {"k": 10, "n_bases": 1000}, "grid": {"seed": [42, 43, 44]}},
        "tiny": {
            "base": {**TINY_RUN, "steps": 120, "ckpt_every": 10},
            "grid": {"seed": [1, 2]},
        },
    },
    "scaling": {
        "cpu": {
            "base": {
                "steps": 4000,
                "eval_every": 20,
                "ckpt_every": 500,
                "eval_groups": "50",
                "seed": 42,
            },
            "d": {"k": [5], "D": [500, 1000, 2000, 4000]},
            "k": {"k": [4, 5, 10], "D": [2000]},
        },
        "paper": {
            "base": {"seed": 42},
            "d": {"k": [3, 5, 7, 10, 15, 20, 25, 36], "n_bases": [1000]},
            "k": {"k": [5, 10, 20, 36], "D": [10000, 20000]},
            # the paper's other three K at n_bases = 1000, and a seed-to-seed scatter of τ
            "d_more": {"k": [13, 17, 30], "n_bases": [1000]},
            "d_seeds": {"k": [3, 10, 20, 36], "n_bases": [1000], "seed": [43, 44]},
        },
        "tiny": {
            "base": {
                "steps": 60,
                "eval_every": 10,
                "ckpt_every": 60,
                "lr": 3e-3,
                "batch_size": 16,
                **TINY_MODEL,
            },
            "d": {"k": [3], "D": [18, 36]},
            "k": {"k": [2, 3], "D": [36]},
        },
    },
    "noise": {
        "cpu": {
            "base": {
                "k": 5,
                "n_bases": 400,
                "steps": 3000,
                "eval_every": 20,
                "ckpt_every": 1000,
                "eval_groups": "50",
                "seed": 42,
            },
            "lr": {"lr": [3e-4, 1e-3, 2e-3, 5e-3]},
            "batch_size": {"batch_size": [32, 64, 128, 256]},
        },
        "paper": {
            "base": {"k": 20, "n_bases": 1000, "seed": 42},
            "lr": {"lr": [3e-4, 5e-4, 1e-3, 2e-3, 5e-3]},
            "batch_size": {"batch_size": [64, 128, 256, 512]},
            # the scatter of τ at the two lowest lr, and the batch sweep under the schedule the
            # paper's batch runs had (its base.yaml: warm-up 500, cosine to 0 at 10,000 steps)
            "lr_seeds": {"lr": [3e-4, 5e-4], "seed": [43, 44]},
            "batch_cosine": {"batch_size": [64, 128, 256, 512], **PAPER_BATCH_SCHEDULE},
        },
        "tiny": {
            "base": {
                "k": 3,
                "n_bases": 12,
                "steps": 60,
                "eval_every": 10,
                "ckpt_every": 60,
                **TINY_MODEL,
            },
            "lr": {"lr": [1e-3, 3e-3]},
            "batch_size": {"batch_size": [8, 16]},
        },
    },
    "asymmetry": {
        # cpu at D = 4000: at D = 1000 both directions solve within ~120 steps, below what evals resolve
        "cpu": {
            "base": {
                "k": 5,
                "n_bases": 800,
                "steps": 4000,
                "eval_every": 20,
                "ckpt_every": 1000,
                "eval_groups": "50",
            },
            "grid": {"direction": ["bz_to_a", "a_to_b"], "seed": [1, 2, 3]},
        },
        "paper": {  # az_to_b: the reverse the paper's code runs (z kept, redundant)
            "base": {"k": 10, "n_bases": 1000},
            "grid": {"direction": ["bz_to_a", "a_to_b", "az_to_b"], "seed": [42, 43, 44]},
            # K = 5, 10, 20, each run on until token accuracy 0.95 and the paper's lag line
            # (first-target loss < 0.1 x step 0's), at our constant lr and (one seed) under the
            # paper's asymmetry schedule (warm-up 500, cosine to 0 at 5,000 steps)
            "k": {"k": [5, 10, 20], "direction": DIRECTIONS, "seed": [42, 43, 44], **ACC_STOP},
            "cosine": {
                "k": [5, 10, 20],
                "direction": DIRECTIONS,
                **ACC_STOP,
                **PAPER_ASYM_SCHEDULE,
            },
        },
        "tiny": {
            "base": TINY_RUN,
            "grid": {"direction": ["bz_to_a", "a_to_b", "az_to_b"], "seed": [1]},
        },
    },
    # the K = 10 baseline again with the paper code's dataset, init and batch order (task/paper.py);
    # no early stop, so its checkpoints reach the steps the paper's ablation table reports (3,700)
    "parity": {
        "cpu": {
            "base": {
                "k": 5,
                "n_bases": 800,
                "steps": 2000,
                "eval_every": 25,
                "ckpt_every": 50,
                "parity": "paper",
                "early_stop": False,
            },
            "grid": {"seed": [42]},
        },
        "paper": {
            "base": {
                "k": 10,
                "n_bases": 1000,
                "steps": 4000,
                "parity": "paper",
                "early_stop": False,
            },
            "grid": {"seed": [42]},
            # K = 20 past the paper's ablation table's steps (1,000 / 3,900 / 7,900), three
            # seeds (the paper code's dataset, init and batch order each): which head routes
            "k20": {"k": [20], "steps": [8000], "seed": [42, 43, 44]},
        },
        "tiny": {
            "base": {**TINY_RUN, "ckpt_every": 10, "parity": "paper", "early_stop": False},
            "grid": {"seed": [1]},
        },
    },
    # interventions on the dynamics: parents whose training states are kept (branch points near
    # 0.25 and 0.75 τ of the K = 10 baseline, 0.5 τ of K = 20), default stop (their post phase)
    "interventions": {
        "cpu": {
            "base": {**CPU_RUN, "state_every": 50},
            "necessity": {"k": [5]},
            "noise": {"k": [5]},
        },
        "paper": {
            "base": {"n_bases": 1000, "seed": 42},
            "necessity": {"k": [10], "state_every": [50]},
            "noise": {"k": [20], "state_every": [100]},
        },
        "tiny": {
            "base": {**TINY_RUN, "steps": 200, "ckpt_every": 10, "state_every": 10},
            "necessity": {"seed": [1]},
            "noise": {"seed": [1]},
        },
    },
    # claim 8, gradient cancellation: G super-groups of bases, each with its own K selectors
    # (z_groups); G = 1 is the baseline. Cancellation across the groups sharing a z predicts τ
    # about linear in G; the paper measures an exponent of ~0.02.
    "sharing": {
        "cpu": {
            "base": CPU_RUN,  # G = 1 is the seeds study's first run (at D = 1,000 τ is ~100 steps at every G)
            "grid": {"z_groups": [1, 4, 20, 100]},
        },
        "paper": {
            "base": {"k": 10, "n_bases": 1000, "seed": 42},
            "grid": {"z_groups": [1, 4, 20, 100]},
        },
        "tiny": {
            "base": TINY_RUN,
            "grid": {"z_groups": [1, 4]},
        },
    },
}

# Hessian settings (claim 5): on the seeds study's first run at its phases, and (paper) on the
# K = 20, n_bases = 1000 run; `sample_sweep`: subsample sizes at one checkpoint (mid), up to the
# whole dataset (None), to see how λmin and the ratio move with the sample; `convergence`: the
# same checkpoint once more with other settings (more Lanczos steps), for λmin after each step.
# The branching studies (`studies.interventions`): a parent per study, trained with its training
# states kept, and the batch-order seeds of its branches.
INTERVENTION_SEEDS = {"cpu": (1, 2, 3), "paper": (1, 2, 3), "tiny": (1,)}

GEOMETRY = {
    "cpu": {"sample": 512, "power_iters": 20, "lanczos_iters": 20, "top_k": 5, "noise_batches": 8},
    "paper": {
        "sample": 2048,
        "power_iters": 20,
        "lanczos_iters": 30,
        "top_k": 10,
        "noise_batches": 16,
        "also": ["k20-nb1000-s42"],
        "sample_sweep": [512, None],
        "convergence": {"sample": 512, "lanczos_iters": 120},  # its first 30 steps: the 512 row's
        # both estimators on the same checkpoints and examples (pre, mid): runs whose weights are
        # kept (the seed-42 baseline retrained under the accuracy stop; the K = 20 parity run)
        "compare": {"runs": ["k10-nb1000-acc0.95-s42", "k20-nb1000-paper-s42"], "sample": 512},
    },
    "tiny": {
        "sample": 24,
        "power_iters": 5,
        "lanczos_iters": 5,
        "top_k": 2,
        "noise_batches": 2,
        "convergence": {"lanczos_iters": 12},
    },
}

# --- the paper scale: every run sized from its expected waiting time --------------------------
# τ of our K = 10, n_bases = 1000, seed-42 baseline (the paper's code, in the shared fixture: 2,100; the
# paper: ~1,850), and the paper's laws: τ ∝ D^1.19, flat in K; τ x 3.6 over ~7x lr (∝ lr^0.66);
# the highest lr never escapes; τ in examples ~constant across batch sizes; the reverse task
# 1.7x-4.4x slower (3x assumed). An estimate for the plan and the step caps, never a result.
TAU_REF, D_REF, ALPHA_D, LR_EXPONENT, REVERSE_FACTOR = 1600, 10_000, 1.19, 0.66, 3.0
NEVER_LR = 5e-3  # the paper: this lr never escapes
STOP_OVER_TAU = 1.85  # early stop (candidate loss < 0.05 log K for 10 evals) / τ, on the baseline
# Runs read only for their τ stop sooner: candidate loss (reverse: token loss, nats) < 0.1 log K
# for 3 evals, ~1.4 τ. Runs whose checkpoints after τ are analysed (the seeds, the Hessian's K = 20
# run) keep the default stop.
FAST_STOP = {"early_stop_frac": 0.1, "early_stop_evals": 3}
FAST_STOP_OVER_TAU = 1.4
# a run's step budget: 3x its expected τ, at its own lr when above 1e-3 (so "never" means > 3 τ)
CAP_OVER_TAU = 3.0

PAPER_CUTS = [
    "K at n_bases = 1000: 3, 5, 7, 10, 15, 20, 25, 36 read by claim 2's fit; 13, 17 and 30 (the "
    "paper's other three) and seeds 43 and 44 at K = 3, 10, 20, 36 train beside it",
    "parity: the K = 10 baseline (4,000 steps) and K = 20 (8,000 steps) with the paper code's data, "
    "init and batches (seed 42, no early stop)",
    "seeds: 3 for the baseline (claims 1, 3, 7) and for each direction (claim 6); the paper used 5+",
    "claim 6 at K = 5, 10, 20 (3 seeds, our constant lr; one seed under the paper's warm-up 500 + "
    "cosine to 0 at 5,000 steps), each run on until token accuracy 0.95 and first-target loss < 0.1 x "
    "its step-0 value for 3 evals, or its step budget (then censored; 9x the forward's expected τ in "
    "both directions)",
    "claim 4: the lr runs below 5e-3 run on to the default stop (candidate loss < 0.05 log K); seeds "
    "43, 44 at lr 3e-4 and 5e-4; the batch sizes again under the paper's batch-run schedule (warm-up "
    "500, cosine to 0 at 10,000 steps)",
    "runs read only for τ (not the seeds, not the K = 20 Hessian run) stop once the candidate "
    "loss stays below 0.1 log K for 3 evals (default: 0.05 log K for 10)",
    "evaluation: a seeded subset of groups, fewer as K grows so an eval costs about what K = 10's does "
    "(round(10,000 / K^2) groups, between 25 and 50: 50 up to K = 14, 25 from K = 20); every 100 steps (at batch "
    "128; every 12,800 examples at other batch sizes) where the expected τ exceeds 3,000 steps",
    "step budget: 3x the run's expected τ (the estimate from D^1.19, and lr^0.66 above lr 1e-3, "
    "also at lr 5e-3 where the paper says never), at least 3,000; "
    "a run that never escapes within it is reported as 'no escape within N steps'",
    "gradient cancellation (claim 8): τ at G = 1, 4, 20, 100 super-groups of the K = 10 baseline, one "
    "seed",
    "interventions: parents K = 10 (training states every 50 steps) and K = 20 (every 100); from "
    "them 2 x 5 branches (K = 10, at the states nearest 0.25 and 0.75 τ) and 6 (K = 20, at 0.5 τ), "
    "3 batch-order seeds each, each to at most 3 x the parent's τ: the branches are not in this "
    "estimate (at most ~25 h of one worker, every branch run to its budget)",
    "Hessian: 2,048-example subsample (the paper's batch), 20 power and 30 Lanczos iterations, at "
    "pre / mid / post of seed 42 and of K = 20; also 512 and all 10,000 examples at seed 42's mid, and "
    "512 examples with 120 Lanczos iterations there (is 30 enough?)",
]


def paper_eval(options: dict) -> dict:
    """Evaluation density for the paper scale: an eval costs about what K = 10's does, and long
    runs every 100 steps (< 3% of their τ); in examples, so the batch sizes share a resolution."""
    k = options.get("k", 10)
    groups = min(50, max(25, round(10_000 / k**2)))
    forward = {**options, "direction": "bz_to_a", "batch_size": 128}  # both directions alike
    every = 100 if expected_tau(forward, at_default_lr=True) > 3000 else 50
    # batch sizes are compared in examples: evaluate every equal number of examples
    return {
        "eval_groups": str(groups),
        "eval_every": max(1, every * 128 // options.get("batch_size", 128)),
    }


def lr_factor(lr: float) -> float:
    """The paper's lr law, τ ∝ lr^0.66, relative to lr 1e-3."""
    return (lr / 1e-3) ** LR_EXPONENT


def expected_tau(options: dict, at_default_lr: bool = False) -> float | None:
    """The plan's estimate of τ (steps) for flat options; None where the paper says never."""
    k, n_bases = options.get("k", 10), options["n_bases"]
    lr = 1e-3 if at_default_lr else options.get("lr", 1e-3)
    if lr >= NEVER_LR:
        return None
    tau = TAU_REF * (k * n_bases / D_REF) ** ALPHA_D * lr_factor(lr)
    tau *= 128 / options.get("batch_size", 128)
    if options.get("direction", "bz_to_a") in ("a_to_b", "az_to_b"):
        tau *= REVERSE_FACTOR
    return tau


def _paper_options(options: dict) -> dict:
    """Step budget and eval density of one paper-scale run (dense checkpoints, default stop)."""
    base_tau = expected_tau(options, at_default_lr=True)
    if "early_stop_acc" in options:  # claim 6: both directions get the reverse's longer budget,
        # since the lag line can come long after τ (K = 20 forward: first-target loss at 0.85 log 36
        # at 3 τ, where the candidate loss was at 0.1 log K)
        base_tau = expected_tau({**options, "direction": "a_to_b"}, at_default_lr=True)
    # at a higher lr, the lr law's τ: also where the paper says "never" (there, the budget is
    # what makes "never" mean more than the law predicts)
    cap = max(3000, CAP_OVER_TAU * base_tau * max(1.0, lr_factor(options.get("lr", 1e-3))))
    return {
        "ckpt_every": 50,
        **paper_eval(options),
        "steps": int(math.ceil(cap / 500) * 500),
        **options,
    }


def _expand(base: dict, grid: dict) -> list[dict]:
    import itertools

    keys = list(grid)
    return [{**base, **dict(zip(keys, combo))} for combo in itertools.product(*grid.values())]


def _defaults() -> dict:
    from dataclasses import MISSING, fields

    from selector_lens.config import ModelConfig, TrainConfig
    from selector_lens.task.selector import SelectorTask

    return {
        f.name: f.default
        for cls in (SelectorTask, ModelConfig, TrainConfig)
        for f in fields(cls)
        if f.default is not MISSING
    }


ALWAYS = ("k", "n_bases", "seed")


def canonical(options: dict) -> dict:
    """D -> n_bases = round(D / K) (as `from_options` does), and options equal to their default
    dropped (K, n_bases and seed kept), so equal runs have equal options and one name."""
    options = dict(options)
    if "D" in options:
        options["n_bases"] = max(1, round(options.pop("D") / options.get("k", 10)))
    defaults = _defaults()
    options = {
        k: v for k, v in options.items() if k in ALWAYS or k not in defaults or v != defaults[k]
    }
    return {"k": defaults["k"], "n_bases": defaults["n_bases"], "seed": defaults["seed"], **options}


def study_runs(scale: str) -> dict[str, dict[str, dict]]:
    """Per study and part, the runs it needs: {"scaling/d": {name: options}, ...}. Equal options
    under one name are one run, shared; a run whose name is taken by other options gets its
    study's name appended (`k5-nb800-s1-asymmetry`)."""
    if scale not in SCALES:
        raise SelectorLensError(f"unknown scale {scale!r}; choose one of {', '.join(SCALES)}")
    parts: dict[str, list[dict]] = {}
    for study, presets in PRESETS.items():
        p = presets[scale]
        grids = {k: v for k, v in p.items() if k != "base"}
        for part, grid in grids.items():
            key = study if part == "grid" else f"{study}/{part}"
            # every grid step evaluated, as the published runs were (τ to the eval spacing)
            parts[key] = [
                canonical({"eval_cadence": "dense", **o}) for o in _expand(p["base"], grid)
            ]
    out: dict[str, dict[str, dict]] = {}
    seen: dict[str, dict] = {}
    for key, points in parts.items():
        out[key] = {}
        for options in points:
            if scale == "paper":
                options = canonical(_paper_options(options))
            name = run_name(options)
            if name in seen and seen[name] != options:
                name = f"{name}-{key.split('/')[0]}"
            seen[name] = options
            out[key][name] = options
    if scale == "paper":  # runs read only for τ stop sooner (FAST_STOP)
        parity = {
            n for key, members in out.items() if key.split("/")[0] == "parity" for n in members
        }
        # claim 4's lr runs run on to 0.05 log K (the paper's window ends there); the lr that
        # never escapes keeps the short stop
        lr = {
            n
            for key in ("noise/lr", "noise/lr_seeds")
            for n, o in out[key].items()
            if o.get("lr", 1e-3) < NEVER_LR
        }
        accuracy = {
            n for members in out.values() for n, o in members.items() if "early_stop_acc" in o
        }
        branched = {
            n for key, members in out.items() if key.startswith("interventions/") for n in members
        }
        full = set(out["seeds"]) | parity | lr | accuracy | branched
        full |= set(GEOMETRY[scale].get("also", []))
        out = {
            key: {n: o if n in full else {**o, **FAST_STOP} for n, o in members.items()}
            for key, members in out.items()
        }
    return out


def pool(scale: str) -> dict[str, dict]:
    """Every distinct run of a scale, in study order (what `reproduce` trains, in this order)."""
    runs: dict[str, dict] = {}
    parts = study_runs(scale)
    first = [
        k for k in ("seeds", "parity") if k in parts
    ]  # the baselines first: the cascade reads them
    for part in [parts[k] for k in first] + [v for k, v in parts.items() if k not in first]:
        for name, options in part.items():
            runs.setdefault(name, options)
    return runs
