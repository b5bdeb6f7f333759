# Each target creates .venv when missing: torch==2.13.0 first (the CPU build on this disk;
# an unpinned torch would pull a multi-GB CUDA build), then the project with its dev extra, as
# the README says. Ray stays an extra: `make test-ray` adds it and runs the Ray executor's test.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DEMO   ?= --k 5 --n-bases 800 --steps 3000 --eval-every 25

# a run with checkpoints for bench_answers.py's store-less answer times (used when present)
K10_RUN ?= checkpoints/reproduce/paper/runs/k10-nb1000-st50-s42

.PHONY: demo test test-ray docs bench clean-demo

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/selector-lens train $(DEMO) --out checkpoints/demo --resume
	$(VENV)/bin/selector-lens dashboard --run checkpoints/demo -o checkpoints/demo/dashboard.html
	@echo "open checkpoints/demo/dashboard.html: the loss sits at log K, then drops once z is used"

test: $(STAMP)
	$(PY) -m ruff format --check src tests benchmarks analyses tools examples
	$(PY) -m ruff check src tests benchmarks analyses tools examples
	$(PY) -m pytest -q
	$(PY) -m pytest -q --nbmake notebooks   # every notebook runs, top to bottom (~35 s)

docs: $(STAMP)
	$(PY) -m pip install -q -e ".[dev,docs]"
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -d site

test-ray: $(STAMP)
	$(PY) -m pip install -q -e ".[dev,ray]"
	$(PY) -m pytest -q -m ray

bench: $(STAMP)
	$(PY) benchmarks/bench_floor.py
	$(PY) benchmarks/bench_core.py
	$(PY) benchmarks/bench_analysis.py
	$(PY) benchmarks/bench_malloc.py
	$(PY) benchmarks/bench_grokking.py
	$(PY) benchmarks/bench_answers.py $(if $(wildcard $(K10_RUN)),--run $(K10_RUN))

clean-demo:
	rm -rf checkpoints/demo
