#!/usr/bin/env bash
# The GPU path, ready to measure: on a machine with CUDA (and this project installed, nothing
# more), 1, 8 and 32 paper-model runs trained as one batched model for 200 steps; on a CPU the
# same at 1, 2 and 4. Prints steps/s per run, peak GPU memory, and the paper preset's projected
# training time at the best rate.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
exec "$PY" benchmarks/bench_gpu.py "$@"
