"""Carry unfinished runs from one session to the next when only the git repository survives.

    python tools/inflight.py save    [--root checkpoints/reproduce/paper]
    python tools/inflight.py restore [--root checkpoints/reproduce/paper]

A paper-scale study outlasts a session, and a fresh workspace keeps `.git` but none of the ignored
run directories. `save` packs what `--resume` reads from each unfinished run under ROOT/runs/ and
each unfinished branch under ROOT/branches/ (run.json, data.json, metrics.jsonl, ckpt/last.pt and
the checkpoint of its step, ~10 MB a run; a branch's ablation values too)
into one commit on `refs/inflight/<ROOT's name>`: outside every branch, so a clone of main never
carries it, and each save replaces the last. `restore` unpacks it wherever the run is missing or
behind; training (`reproduce`, `study`, `sweep`) then resumes from there exactly. Finished runs
travel the usual way, published into analyses/results/.
"""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from selector_lens.runs import rundir

IDENTITY = {"NAME": "selector-lens inflight", "EMAIL": "inflight@selector-lens"}  # unless set
FILES = ("run.json", "data.json", "metrics.jsonl", "ckpt/last.pt")
OPTIONAL = ("ablation.safetensors",)  # a branch's mean head outputs, where it ablates heads


def unfinished(root: Path) -> list[Path]:
    """Every run under ROOT/runs/ and ROOT/branches/ (at any depth) that has a resume state and
    has not finished."""
    found = sorted(p for p in (root / "runs").glob("*") if p.is_dir())
    found += sorted(p.parent for p in (root / "branches").rglob("run.json"))
    return [p for p in found if rundir.is_run(p) and not rundir.is_done(p) and state_step(p)]


def git(*args: str, repo: Path, env: dict | None = None, check: bool = True) -> bytes:
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, check=check, capture_output=True
    ).stdout


def state_step(path: Path) -> int:
    """The step of a run's resume state (0 when it has none)."""
    last = path / "ckpt" / "last.pt"
    return int(torch.load(last, weights_only=True)["step"]) if last.is_file() else 0


def _pack(path: Path, repo: Path) -> tuple[int, dict[str, str]]:
    """Blobs of a run's resume files, re-read until no checkpoint lands while reading them."""
    while True:
        step = state_step(path)
        names = [*FILES, *(n for n in OPTIONAL if (path / n).is_file())]
        names.append(f"ckpt/step_{step:06d}.safetensors")
        blobs = {
            n: git("hash-object", "-w", str(path.resolve() / n), repo=repo).decode().strip()
            for n in names
        }
        if state_step(path) == step:
            return step, blobs


def save(root: Path, ref: str, repo: Path = Path(".")) -> list[str]:
    """Pack every unfinished run with a resume state into one parentless commit on `ref`."""
    saved = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        for path in unfinished(root):
            step, blobs = _pack(path, repo)
            where = path.relative_to(root).as_posix()  # runs/NAME or branches/.../NAME
            for name, blob in blobs.items():
                info = f"100644,{blob},{where}/{name}"
                git("update-index", "--add", "--cacheinfo", info, repo=repo, env=env)
            saved.append(f"{where} at step {step}")
        if not saved:  # nothing left in flight: a stale pack would bring back finished runs
            git("update-ref", "-d", ref, repo=repo, check=False)
            return saved
        tree = git("write-tree", repo=repo, env=env).decode().strip()
    message = "unfinished runs: " + "; ".join(saved)
    who = {f"GIT_{r}_{f}": v for r in ("AUTHOR", "COMMITTER") for f, v in IDENTITY.items()}
    commit = git("commit-tree", tree, "-m", message, repo=repo, env={**who, **os.environ})
    git("update-ref", ref, commit.decode().strip(), repo=repo)
    return saved


def restore(root: Path, ref: str, repo: Path = Path(".")) -> list[str]:
    """Unpack `ref` into ROOT where a run is missing or behind the packed step (packs from before
    branches were carried name runs/ NAME without its runs/)."""
    if not git("rev-parse", "-q", "--verify", ref, repo=repo, check=False):
        return []  # nothing was saved
    listing = git("ls-tree", "-r", "--format=%(objectname) %(path)", ref, repo=repo)
    runs: dict[str, list[tuple[str, str]]] = {}
    for line in filter(None, listing.decode().split("\n")):
        blob, name = line.split(" ", 1)
        if name.split("/", 1)[0] not in ("runs", "branches"):
            name = f"runs/{name}"
        run, rel = name.split("/ckpt/", 1) if "/ckpt/" in name else name.rsplit("/", 1)
        rel = f"ckpt/{rel}" if f"{run}/ckpt/" in name else rel
        runs.setdefault(run, []).append((blob, rel))
    restored = []
    for run, files in runs.items():
        path = root / run
        packed = next(int(r[10:].split(".")[0]) for _, r in files if r.startswith("ckpt/step_"))
        if rundir.is_run(path) and (rundir.is_done(path) or state_step(path) >= packed):
            continue
        for blob, rel in files:
            (path / rel).parent.mkdir(parents=True, exist_ok=True)
            (path / rel).write_bytes(git("cat-file", "blob", blob, repo=repo))
        restored.append(f"{run} at step {packed}")
    return restored


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("save", "restore"))
    parser.add_argument("--root", type=Path, default=Path("checkpoints/reproduce/paper"))
    args = parser.parse_args(argv)
    ref = f"refs/inflight/{args.root.name}"
    done = (save if args.action == "save" else restore)(args.root, ref)
    print(f"{args.action}d {len(done)} runs ({ref}): " + ("; ".join(done) or "none"))


if __name__ == "__main__":
    main(sys.argv[1:])
