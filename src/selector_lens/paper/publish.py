"""Published results: what the report needs from a study root, small enough to commit.

`publish(root, dest)` copies, per finished run, `run.json`, `metrics.jsonl.gz`, the analysis
store (`analyses/`: every table computed from checkpoints) and `checkpoints.json` (step ->
checksum of the weights left out, so phases and stored tables still resolve). The dataset is
not copied: it is regenerated from the config (`SelectorTask.generate` is deterministic). Then the
report is rebuilt from `dest` alone (`reproduce(from_=dest)`): study JSONs and HTML, `report.json`
and `report.html`. Nothing in `dest` needs a checkpoint.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

from selector_lens.errors import SelectorLensError
from selector_lens.files import atomic_write, sha256_sums, write_json
from selector_lens.runs import rundir
from selector_lens.runs.run import Run
from selector_lens.runs.store import MANIFEST, PUBLISHED, STORE_DIR, SUMS, checkpoint_checksum

LIMIT_MB = 25


def publish_run(run: Run, dest: Path) -> None:
    """One finished run's published form in `dest` (replacing what was there)."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(run.path / rundir.RUN_JSON, dest / rundir.RUN_JSON)
    raw = (run.path / rundir.METRICS).read_bytes()
    atomic_write(
        dest / rundir.METRICS_PACKED, lambda tmp: tmp.write_bytes(gzip.compress(raw, mtime=0))
    )
    manifest = {str(s): checkpoint_checksum(run.ckpt_path(s)) for s in run.steps}
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=0))
    if (run.path / STORE_DIR).is_dir():
        shutil.rmtree(dest / STORE_DIR, ignore_errors=True)
        shutil.copytree(run.path / STORE_DIR, dest / STORE_DIR)


def _check_parent_kept(run: Run, dest: Path) -> None:
    """Refuse, before anything is written, to replace a published run that published branches
    start from with another training of it (other weights at a step both keep): its branches'
    study would lose its parent."""
    kept = dest / "runs" / run.path.name / MANIFEST
    if not (dest / "branches" / run.path.name).is_dir() or not kept.is_file():
        return
    published = json.loads(kept.read_text())
    for step in run.steps:
        old = published.get(str(step))
        if old is not None and old != checkpoint_checksum(run.ckpt_path(step)):
            raise SelectorLensError(
                f"{run.path.name} is the parent of the published branches in "
                f"{dest / 'branches' / run.path.name}, and this training of it has other weights "
                f"at step {step}: publishing it would orphan them (move {run.path} out of "
                f"{run.path.parent} to publish the rest)"
            )


def write_tau_vs_d_svg(scaling: dict, path: Path) -> None:
    """τ against D on log-log axes with the fitted power law (from a scaling study's JSON)."""
    from selector_lens.viz.static import loglog_svg

    points = scaling.get("tau_vs_D_points") or []
    if len(points) < 2:
        return
    fit = (scaling.get("fits") or {}).get("tau_vs_D")
    ks = [k for _, _, k in points]
    title = f"τ vs D at n_bases = 1000, K = {min(ks)}..{max(ks)}"
    if fit:
        lo, hi = fit["alpha_ci"]
        title += f": α = {fit['alpha']:.2f} [{lo:.2f}, {hi:.2f}] (paper 1.19)"
    paper = (scaling.get("paper") or {}).get("points")
    labelled, ours = set(), []
    for d, t, k in points:  # one label per K: several seeds share a D
        ours.append((d, t, "" if (d, k) in labelled else f"K={k}"))
        labelled.add((d, k))
    svg = loglog_svg(
        ours,
        title,
        "D (examples)",
        "τ (steps)",
        (fit["C"], fit["alpha"]) if fit else None,
        reference=(paper["name"], list(zip(paper["D"], paper["tau"]))) if paper else None,
    )
    path.write_text(svg)


def publish(root, dest, scale: str | None = None, output=None) -> dict:
    """Publish every finished run under `<root>/runs/` into `<dest>/runs/`, then rebuild the
    report from `dest` alone. Returns the report's summary plus what was published."""
    from selector_lens.paper.studies import reproduce

    root, dest = Path(root), Path(dest)
    if not (root / "runs").is_dir():
        raise SelectorLensError(
            f"{root} holds no runs (no runs/ folder); run `selector-lens reproduce` first"
        )
    runs = [p for p in sorted((root / "runs").iterdir()) if rundir.is_run(p)]
    done = [p.name for p in runs if rundir.is_done(p)]
    pending = [p.name for p in runs if p.name not in done]
    finished = [Run.open(root / "runs" / name) for name in done]
    for run in finished:  # every check before anything is written
        _check_parent_kept(run, dest)
    for run in finished:
        publish_run(run, dest / "runs" / run.path.name)
    # the studies' branches of some runs, in the same tree shape, and the branch points they
    # start from where a parent was trained again up to one (`branch-points/`: their lineage)
    for kind in ("branches", "branch-points"):
        where = root / kind
        for path in sorted(where.rglob(rundir.RUN_JSON)) if where.is_dir() else []:
            if rundir.is_done(path.parent):
                publish_run(Run.open(path.parent), dest / path.parent.relative_to(root))
    write_json(dest / SUMS, sha256_sums(dest, PUBLISHED))  # what `reproduce --from` checks
    if scale is None:
        scale = (
            json.loads((root / "report.json").read_text())["scale"]
            if (root / "report.json").is_file()
            else "paper"
        )
    summary = reproduce(
        scale, output=Path(output) if output else dest / "report.html", from_=dest, out=dest
    )
    scaling = dest / "scaling" / "scaling.json"
    if scaling.is_file():  # the README's figure: τ vs D, as a static image
        write_tau_vs_d_svg(json.loads(scaling.read_text()), dest / "tau_vs_d.svg")
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file()) / 1e6
    summary.update({"published": done, "still_running": pending, "size_mb": size})
    (dest / "report.json").write_text(
        json.dumps({k: v for k, v in summary.items() if k != "output"}, indent=1, default=str)
    )
    if size > LIMIT_MB:
        raise SelectorLensError(
            f"{dest} holds {size:.1f} MB, over the {LIMIT_MB} MB limit for published results"
        )
    return summary
