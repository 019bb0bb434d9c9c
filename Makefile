# flexcomm: the README's two set-up commands are `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.flexcomm-installed
RESULTS ?= results

.PHONY: install demo test lint bench clean

# torch first, pinned to the CPU wheel on disk; a looser spec would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/flexcomm whatif --out $(RESULTS)/whatif

# one torch thread per test process: the models are tiny, and on few shared cores a thread pool spins longer
# than the kernels run (measured 6x on the notebook tests)
test: install
	$(PY) -m ruff check .
	OMP_NUM_THREADS=1 $(PY) -m pytest

lint: install
	$(PY) -m ruff check .

bench: install
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) $(RESULTS) .pytest_cache .ruff_cache .hypothesis
