"""Each study's "ours" sentence, built from its table alone (the rows its JSON holds)."""

from __future__ import annotations

import math

import numpy as np

from selector_lens.paper.studies.base import _fmt


def _join(values, spec: str) -> str:
    return ", ".join(_fmt(v, spec) for v in values)


def marginal_first(rows: list[dict]) -> str:
    heights = [r["plateau_over_log_k"] for r in rows if r["plateau_over_log_k"] is not None]
    drops = [r["drop_90_to_10_over_tau"] for r in rows if r["drop_90_to_10_over_tau"] is not None]
    return (
        f"plateau / log K = {_join(heights, '.3g')} ({len(rows)} seeds); final candidate loss "
        f"{_join([r['final_candidate_loss'] for r in rows], '.3f')}; drop 0.9→0.1 log K within "
        f"{_fmt(max(drops) if drops else None, '.2f')} τ; first-target loss on the plateau "
        f"{_join([r['first_target_on_plateau'] for r in rows], '.2f')} (log K {rows[0]['log_k']:.2f}, "
        f"log 36 {math.log(36):.2f})"
    )


def collective(rows: list[dict]) -> str:
    done = [r for r in rows if r["tau"]]
    window = [r.get("window_over_tau") for r in done if r.get("window_over_tau") is not None]
    incr = [
        r["incremental_window_over_tau"]
        for r in done
        if r.get("incremental_window_over_tau") is not None
    ]
    return (
        f"groups solved at τ/2: {_join([r.get('crossed_by_half_tau') for r in done], '.0%')}; at τ: "
        f"{_join([r.get('crossed_by_tau') for r in done], '.0%')}; at 1.5τ: "
        f"{_join([r.get('crossed_by_1.5_tau') for r in done], '.0%')}; 10%→90% window "
        f"{_join(window, '.2f')} τ (group-by-group would be ~"
        f"{_fmt(np.mean(incr) if incr else None, '.2f')} τ)"
    )


def cascade(rows: list[dict]) -> str:
    def one(r: dict) -> str:
        deltas = "/".join(_fmt(r["mean_ablation_delta"][p], "+.2f") for p in ("pre", "mid", "post"))
        return (
            f"{r['run']}: {r['routing_head']}, Δz leads the first-target onset (the paper's) by "
            f"{_fmt(r.get('paper_lead_steps'), 'g')} steps = {_fmt(r.get('paper_lead_frac'), '.2f')} τ "
            f"and τ (ours) by {_fmt(r['dz_lead_frac'], '.2f')} τ "
            f"(attention by {_fmt(r['attn_lead_frac'], '.2f')} τ), mean ablation Δ pre/mid/post "
            f"{deltas} nats, best head alone {r['best_alone']} at "
            f"{_fmt(r['best_alone_candidate_loss'], '.2f')} nats"
        )

    return "; ".join(one(r) for r in rows if r["tau"]) or "no run transitioned"


def geometry(
    rows: list[dict],
    sweep: list[dict],
    convergence: list[dict] = (),
    compared: list[dict] = (),
    subclaims: dict | None = None,
) -> str:
    at_phases = [
        f"{r['run']} {r['phase']} (step {r['step']}): λmax {_fmt(r['lambda_max'])}, λmin "
        f"{_fmt(r['lambda_min'])}, ratio {_fmt(r['ratio'])}, noise on top {r['top_k']} "
        f"{_fmt(r['noise_share_top'], '.0%')} (random {_fmt(r['random_share'], '.1e')})"
        for r in rows
    ]
    by_sample = [
        f"; {r['run']} mid at {r['sample']} examples: ratio {_fmt(r['ratio'])} "
        f"(λmin {_fmt(r['lambda_min'])})"
        for r in sweep
    ]
    by_step = []
    for r in convergence:
        low, high = r["lambda_min_by_step"], r["lambda_max_by_step"]
        marks = [m for m in (2, 3, 5, 10, 20, 30, 60) if m < len(low)] + [len(low)]
        by_step.append(
            f"; {r['run']} mid at {r['sample']} examples, λmin (λmax / |λmin|) after "
            + ", ".join(
                f"{m} Lanczos steps {_fmt(low[m - 1])} ({_fmt(high[m - 1] / abs(low[m - 1]))})"
                for m in marks
            )
        )
    by_estimator = [
        f"; {c['run']} {c['phase']} (step {c['step']}, {c['sample']} examples): the paper's "
        f"estimator λmin {_fmt(c['shifted_lambda_min'], '.2g')} (stopped after "
        f"{c['shifted_iters']} products), ratio {_fmt(c['shifted_ratio'], '.3g')}; Lanczos λmin "
        f"{_fmt(c['lanczos_lambda_min'], '.3g')}, ratio {_fmt(c['lanczos_ratio'], '.3g')}"
        for c in compared
    ]
    judged = "".join(
        f"; {k}: {'yes' if v else 'no' if v is False else 'undetermined'}"
        for k, v in (subclaims or {}).items()
    )
    return (
        "; ".join(at_phases)
        + "".join(by_sample)
        + "".join(by_step)
        + "".join(by_estimator)
        + judged
    )
