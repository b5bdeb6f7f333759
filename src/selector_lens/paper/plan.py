"""`reproduce --plan`: every run a scale's studies need, its budget, and what it will cost here.

Costs are measured on the spot, in the parallel layout the sweep will use (`workers` processes
at once, cores / workers torch threads each, so the contention is in the number): a training
step at each batch size the scale uses, an evaluation at each (K, eval groups) shape, a
Hessian-vector product. Expected steps come from `presets.expected_tau` (the paper's laws around
our K = 10 baseline): an estimate for planning, never a result. Nothing is trained.
"""

from __future__ import annotations

import os
import time

from selector_lens.paper.presets import (
    FAST_STOP_OVER_TAU,
    GEOMETRY,
    STOP_OVER_TAU,
    expected_tau,
    pool,
    study_runs,
)

CASCADE_EVALS = (
    40  # ablated evaluations per seed run: 16 heads x (necessity + sufficiency) + phases
)
ABLATED_EVAL_COST = 1.5  # an ablated evaluation runs the shared prefix per example


def expected_steps(options: dict) -> int:
    """Steps a run is expected to take: early stop at ~1.85 τ (~1.4 τ with the fast stop), or its
    whole budget if it never escapes."""
    tau = expected_tau(options)
    steps = options.get("steps", 6000)
    stop = FAST_STOP_OVER_TAU if options.get("early_stop_evals") == 3 else STOP_OVER_TAU
    return steps if tau is None else int(min(steps, stop * tau))


def _measure(jobs: dict, threads: int) -> dict:
    """Time a training step per batch size, an evaluation per (K, groups), one HVP (one process),
    on `threads` threads (the caller's count is restored)."""
    import torch

    before = torch.get_num_threads()
    try:
        return _timings(jobs, threads)
    finally:
        torch.set_num_threads(before)


def eval_work(shape: tuple[int, int]) -> int:
    """An evaluation's work in candidate scorings: each of K x groups examples scores K targets."""
    k, groups = shape
    return groups * k * k


def _timings(jobs: dict, threads: int) -> dict:
    import torch

    from selector_lens.analysis.landscape import Curvature, target_loss
    from selector_lens.config import from_options
    from selector_lens.model.adapter import build_model
    from selector_lens.model.metrics import evaluate
    from selector_lens.task.eval_set import make_eval_set
    from selector_lens.training.trainer import train_step

    torch.set_num_threads(threads)
    out = {"step": {}, "eval": {}}
    model_opts = jobs["model"]
    for bs in jobs["batch_sizes"]:
        cfg = from_options({**model_opts, "k": 10, "n_bases": 100, "batch_size": bs})
        data = cfg.task.generate()
        model = build_model(cfg.model, cfg.task, 0)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(0)
        times = []
        for _i in range(5):
            batch = data.tokens[torch.randint(len(data.tokens), (bs,), generator=g)][None]
            t = time.perf_counter()
            train_step([model], [opt], batch, cfg.task.first_target_pos, 1.0)
            times.append(time.perf_counter() - t)
        out["step"][bs] = sorted(times[2:])[len(times[2:]) // 2]
    # the smallest and the largest evaluation timed (the first also warms up), the others on the
    # line between them in `eval_work`: within ~10 % of timing each, in a fifth of the time
    ends = sorted({min(jobs["evals"], key=eval_work), max(jobs["evals"], key=eval_work)})
    timed = {}
    for i, (k, groups) in enumerate([ends[0], *ends]):
        cfg = from_options({**model_opts, "k": k, "n_bases": groups})
        model = build_model(cfg.model, cfg.task, 0).eval()
        es = make_eval_set(cfg.task.generate(), str(groups))
        t = time.perf_counter()
        evaluate(model, es)
        if i:
            timed[(k, groups)] = time.perf_counter() - t
    (w0, t0), (w1, t1) = ((eval_work(s), timed[s]) for s in (ends[0], ends[-1]))
    slope = (t1 - t0) / (w1 - w0) if w1 > w0 else t0 / w0
    for shape in jobs["evals"]:
        out["eval"][shape] = timed.get(shape, t0 + slope * (eval_work(shape) - w0))
    if jobs.get("hvp_sample"):
        cfg = from_options({**model_opts, "k": 10, "n_bases": 100})
        data = cfg.task.generate()
        model = build_model(cfg.model, cfg.task, 0)
        x = data.tokens[torch.randint(len(data.tokens), (jobs["hvp_sample"],))]
        curv = Curvature(
            model.parameters(), lambda: target_loss(model, x, cfg.task.first_target_pos)
        )
        v = torch.randn(curv.n)
        curv.hvp(v)
        t = time.perf_counter()
        curv.hvp(v)
        out["hvp_per_example"] = (time.perf_counter() - t) / jobs["hvp_sample"]
    return out


def measure_costs(jobs: dict, workers: int) -> dict:
    """`_measure` in `workers` processes at once (the sweep's layout); the mean of their times."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    cores = os.cpu_count() or 1
    threads = max(1, cores // workers)
    if workers == 1:
        return _measure(jobs, threads)
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as ex:
        results = list(ex.map(_measure, [jobs] * workers, [threads] * workers))
    mean = {"step": {}, "eval": {}}
    for key in ("step", "eval"):
        for shape in results[0][key]:
            mean[key][shape] = sum(r[key][shape] for r in results) / workers
    if "hvp_per_example" in results[0]:
        # analyses run alone, with every core: measured under contention, so an upper bound
        mean["hvp_per_example"] = sum(r["hvp_per_example"] for r in results) / workers
    return mean


def _eval_shape(options: dict) -> tuple[int, int]:
    from selector_lens.task.eval_set import resolve_eval_groups

    return options.get("k", 10), resolve_eval_groups(
        options.get("eval_groups", "auto"), options["n_bases"]
    )


def plan(scale: str, workers: int | None = None, costs: dict | None = None) -> dict:
    """Every run per study (settings, budget, expected steps, estimated wall time), per-study and
    total estimates, the analyses' estimate and the scale's stated cuts. `costs`: measured
    times (default: measured now)."""
    from selector_lens.paper.presets import PAPER_CUTS

    runs = pool(scale)
    cores = os.cpu_count() or 1
    workers = max(1, min(workers or cores, len(runs)))
    model_keys = ("n_layers", "n_heads", "d_model", "d_head", "d_mlp")
    model_opts = {k: v for k, v in next(iter(runs.values())).items() if k in model_keys}
    geo = GEOMETRY[scale]
    jobs = {
        "model": model_opts,
        "batch_sizes": sorted({o.get("batch_size", 128) for o in runs.values()}),
        "evals": sorted({_eval_shape(o) for o in runs.values()}),
        "hvp_sample": min(256, geo["sample"]),
    }
    load = (
        os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    )  # busy cores inflate every estimate
    t0 = time.perf_counter()
    costs = costs or measure_costs(jobs, workers)
    measured_s = time.perf_counter() - t0

    def run_cost(o: dict) -> dict:
        steps = expected_steps(o)
        evals = steps // o.get("eval_every", 50) + 1
        step_s = costs["step"][o.get("batch_size", 128)]
        eval_s = costs["eval"][_eval_shape(o)]
        return {
            "expected_steps": steps,
            "train_s": steps * step_s,
            "eval_s": evals * eval_s,
            "wall_s": steps * step_s + evals * eval_s,
        }

    rows, owner = [], {}
    for part, members in study_runs(scale).items():
        for name, o in members.items():
            shared = owner.setdefault(name, part) != part
            tau = expected_tau(o)
            rows.append(
                {
                    "study": part,
                    "run": name,
                    "shared_with": owner[name] if shared else None,
                    "k": o.get("k"),
                    "n_bases": o["n_bases"],
                    "D": o.get("k", 10) * o["n_bases"],
                    "lr": o.get("lr", 1e-3),
                    "batch_size": o.get("batch_size", 128),
                    "direction": o.get("direction", "bz_to_a"),
                    "seed": o.get("seed"),
                    "eval_every": o.get("eval_every", 50),
                    "eval_groups": _eval_shape(o)[1],
                    "budget": o.get("steps", 6000),
                    "expected_tau": None if tau is None else round(tau),
                    **(
                        {"expected_steps": 0, "train_s": 0.0, "eval_s": 0.0, "wall_s": 0.0}
                        if shared
                        else run_cost(o)
                    ),
                }
            )
    # the local executor takes runs in this order as workers free up: simulate it
    free = [0.0] * workers
    for r in rows:
        if r["shared_with"] is None:
            i = free.index(min(free))
            free[i] += r["wall_s"]
    train_wall = max(free)
    eval10 = (
        costs["eval"].get(_eval_shape(next(iter(runs.values()))), 0.0) * ABLATED_EVAL_COST / workers
    )
    n_seeds = len(study_runs(scale)["seeds"])
    analyses = {"cascade": n_seeds * CASCADE_EVALS * eval10}
    hvps = geo["power_iters"] + geo["lanczos_iters"] + 1  # + gradients (~1/3 of an HVP each) below
    per_ex = costs.get("hvp_per_example", 0.0) / workers
    n_ckpt = 3 * (1 + len(geo.get("also", [])))
    base_d = next(iter(study_runs(scale)["seeds"].values()))
    d = base_d.get("k", 10) * base_d["n_bases"]
    sweep_examples = sum(d if s is None else min(s, d) for s in geo.get("sample_sweep", []))
    batch = base_d.get("batch_size", 128)
    noise = n_ckpt * geo["noise_batches"] * batch * per_ex / 3
    conv = {**geo, **geo.get("convergence", {})}
    conv_hvp_examples = (  # the convergence check: one more measurement, more Lanczos steps
        (conv["power_iters"] + conv["lanczos_iters"] + 1) * min(conv["sample"], d)
        if "convergence" in geo
        else 0
    )
    compare = geo.get("compare", {})
    compare_hvp_examples = (  # both estimators at pre and mid: Lanczos's products, and at most
        # 2 x 50 of the paper's power iterations (λmax, then λmin under the shift)
        len(compare.get("runs", [None])) * 2 * (hvps + 100) * min(compare["sample"], d)
        if compare
        else 0
    )
    analyses["geometry"] = (
        hvps * per_ex * (n_ckpt * min(geo["sample"], d) + sweep_examples)
        + (conv_hvp_examples + compare_hvp_examples) * per_ex
        + noise
    )
    studies = {}
    for r in rows:
        s = studies.setdefault(
            r["study"].split("/")[0], {"runs": 0, "new_runs": 0, "expected_steps": 0, "wall_s": 0.0}
        )
        s["runs"] += 1
        s["new_runs"] += r["shared_with"] is None
        s["expected_steps"] += r["expected_steps"]
        s["wall_s"] += r["wall_s"]
    return {
        "scale": scale,
        "workers": workers,
        "threads_per_run": max(1, cores // workers),
        "measured": {
            "step_s": costs["step"],
            "eval_s": {f"K={k}, {g} groups": v for (k, g), v in costs["eval"].items()},
            "hvp_s_per_example": costs.get("hvp_per_example"),
            "measuring_took_s": measured_s,
            "load_average_before": load,
            "cores": cores,
        },
        "runs": rows,
        "studies": studies,
        "train_wall_s": train_wall,
        "analyses_s": analyses,
        "total_wall_s": train_wall + sum(analyses.values()),
        "cuts": PAPER_CUTS if scale == "paper" else [],
        "note": "expected steps: early stop at ~1.85 x the expected τ (τ from D^1.19 around our K = 10 "
        "baseline's 1,600, x lr^0.66, x 128 / batch, x 3 for the reverse task); runs the paper "
        "says never escape take their whole budget. Per-study wall times are single-worker sums; "
        "the total schedules the runs on the workers in this order.",
    }


def format_plan(p: dict) -> str:
    """The plan as text: one line per run, then per-study and total estimates."""

    def hms(s: float) -> str:
        return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min"

    m = p["measured"]
    lines = [
        f"reproduce --scale {p['scale']} --plan: {p['workers']} runs at a time, "
        f"{p['threads_per_run']} thread(s) each",
        "measured now: step "
        + ", ".join(f"batch {b} {t * 1e3:.0f} ms" for b, t in m["step_s"].items())
        + "; eval "
        + ", ".join(f"{k} {v:.2f} s" for k, v in m["eval_s"].items()),
    ]
    if m.get("load_average_before") is not None and m["load_average_before"] > 0.5 * m["cores"]:
        lines.append(
            f"note: the load average was {m['load_average_before']:.1f} on {m['cores']} cores while "
            "measuring: other work shares the machine, so these times (and the estimates) are inflated"
        )
    lines.append("")
    head = (
        f"{'study':<18}{'run':<26}{'D':>7}{'lr':>8}{'batch':>6}{'eval':>9}{'budget':>8}{'exp. τ':>8}"
        f"{'exp. steps':>11}{'est.':>9}"
    )
    lines.append(head)
    for r in p["runs"]:
        tau = "never" if r["expected_tau"] is None else str(r["expected_tau"])
        est = f"= {r['shared_with']}" if r["shared_with"] else hms(r["wall_s"])
        lines.append(
            f"{r['study']:<18}{r['run']:<26}{r['D']:>7}{r['lr']:>8g}{r['batch_size']:>6}"
            f"{str(r['eval_groups']) + '/' + str(r['eval_every']):>9}{r['budget']:>8}{tau:>8}"
            f"{r['expected_steps']:>11}{est:>9}"
        )
    lines.append("")
    for name, s in p["studies"].items():
        lines.append(
            f"{name:<12} {s['new_runs']} new of {s['runs']} runs, {s['expected_steps']} steps, "
            f"{hms(s['wall_s'])} of one worker"
        )
    lines.append("analyses: " + ", ".join(f"{k} {hms(v)}" for k, v in p["analyses_s"].items()))
    lines.append(
        f"total: training {hms(p['train_wall_s'])} on {p['workers']} workers + analyses "
        f"= {hms(p['total_wall_s'])}"
    )
    for c in p["cuts"]:
        lines.append(f"cut: {c}")
    lines.append(p["note"])
    return "\n".join(lines)
