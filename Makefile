# flexcomm: the README's two set-up commands are `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.flexcomm-installed
RESULTS ?= results

.PHONY: install data simgrid demo test lint bench figures notebooks clean gpu-kit gpu-rehearse

# torch first, pinned to the CPU wheel on disk; a looser spec would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# Fashion-MNIST from Debian's dataset-fashion-mnist (apt, as root); without it the digits workloads still work and
# the Fashion-MNIST ones say how to install it
FASHION_DIR := /usr/share/datasets/fashion-mnist
# SimGrid's Python bindings (Debian's python3-simgrid), the simulator's referee in the tests; skipped with the
# reason where they cannot be installed
simgrid:
	@if [ -f /usr/lib/python3/dist-packages/simgrid.cpython-311-x86_64-linux-gnu.so ]; then echo "simgrid: present"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-simgrid >/dev/null 2>&1 \
		|| (apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-simgrid >/dev/null 2>&1) \
		|| echo "simgrid: could not install python3-simgrid with apt; the SimGrid referee tests are skipped"; \
	else echo "simgrid: missing; as root run: apt-get install python3-simgrid (the SimGrid referee tests are skipped)"; fi

data:
	@if [ -f $(FASHION_DIR)/train-images-idx3-ubyte.gz ]; then echo "data: Fashion-MNIST present in $(FASHION_DIR)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1 \
		|| (apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1) \
		|| echo "data: could not install dataset-fashion-mnist with apt; the Fashion-MNIST workloads and tests are skipped"; \
	else echo "data: Fashion-MNIST missing; as root run: apt-get install dataset-fashion-mnist (the Fashion-MNIST workloads and tests are skipped)"; fi

demo: install
	$(VENV)/bin/flexcomm whatif --out $(RESULTS)/whatif

# one torch thread per test process: the models are tiny, and on few shared cores a thread pool spins longer
# than the kernels run (measured 6x on the notebook tests)
test: install data simgrid
	$(PY) -m ruff check .
	OMP_NUM_THREADS=1 $(PY) -m pytest

# the notebooks: pair each .py source with its .ipynb (jupytext), then execute it in a kernel (nbclient) so the
# committed notebook shows its outputs and figures
notebooks: install
	$(VENV)/bin/jupytext --sync notebooks/[0-9]*.py
	OMP_NUM_THREADS=1 $(VENV)/bin/jupyter execute --inplace --timeout=600 notebooks/[0-9]*.ipynb

# the figures the README and docs show, redrawn from their commands (docs/figures/)
figures: install
	FLEXCOMM_FIGURE_DPI=80 $(VENV)/bin/flexcomm whatif --out $(RESULTS)/figures/whatif
	FLEXCOMM_FIGURE_DPI=80 $(VENV)/bin/flexcomm whatif --cluster dgx-h100 --out $(RESULTS)/figures/whatif-h100
	cp $(RESULTS)/figures/whatif-h100/whatif_nic_sweep.png docs/figures/whatif_nic_sweep_dgx-h100.png
	FLEXCOMM_FIGURE_DPI=80 $(VENV)/bin/flexcomm train-emulated --strategies dense,topk-ag,topk-ar,flexible,moo \
		--steps 300 --network c1 --price-params 25.56M --compute-time 28ms --workers 8 \
		--out $(RESULTS)/figures/emulated --no-progress
	FLEXCOMM_FIGURE_DPI=80 $(VENV)/bin/flexcomm plan --model resnet18 --cluster 4x8-a100-ib \
		--out $(RESULTS)/figures/plan --no-progress
	FLEXCOMM_FIGURE_DPI=80 $(VENV)/bin/flexcomm validate --published --out $(RESULTS)/figures/published --no-progress
	mkdir -p docs/figures
	cp $(RESULTS)/figures/whatif/whatif_resnet50.png $(RESULTS)/figures/emulated/emulated.png \
		$(RESULTS)/figures/plan/plans.png docs/figures/
	cp $(RESULTS)/figures/published/figures/oci-a100-2n16g-allreduce-8G-k8s.png docs/figures/published_a100_2x8.png
	FLEXCOMM_FIGURE_DPI=80 $(VENV)/bin/flexcomm simulate --scenario experiments/studies/scenario-two-jobs.yaml \
		--out $(RESULTS)/figures/scenario
	cp $(RESULTS)/figures/scenario/link_utilization.png docs/figures/scenario_utilization.png
	FLEXCOMM_FIGURE_DPI=80 $(VENV)/bin/flexcomm clusters dgx-h100-rail-pod --draw docs/figures/topo_rail_pod.png
	$(VENV)/bin/flexcomm reproduce megatron korthikanti --out $(RESULTS)/figures/reproduce --no-progress
	cp $(RESULTS)/figures/reproduce/megatron.png $(RESULTS)/figures/reproduce/korthikanti.png docs/figures/
	$(VENV)/bin/flexcomm validate --published-training --out $(RESULTS)/figures/published-training --no-progress
	cp $(RESULTS)/figures/published-training/training.png docs/figures/published_training.png
	cp $(RESULTS)/figures/published-training/compute.png docs/figures/published_compute.png
	FLEXCOMM_FIGURE_DPI=80 $(VENV)/bin/flexcomm validate --published-llm --out $(RESULTS)/figures/published-llm
	cp $(RESULTS)/figures/published-llm/llm.png docs/figures/published_llm.png

lint: install
	$(PY) -m ruff check .

bench: install
	$(PY) benchmarks/run_all.py

# Everything the lent GPU machine lacks, as wheels under gpu-kit/ (ignored; under 64 MiB): see docs/real-backend.md.
gpu-kit: install
	$(PY) -m flexcomm.experiments.commands.gpu_kit

# The GPU check's every step on the CPU, in the device's conditions (a fresh venv, the kit with --no-index).
gpu-rehearse: gpu-kit
	real_backend/gpu_check.sh --rehearse $(RESULTS)/gpu_rehearsal

clean:
	rm -rf $(VENV) $(RESULTS) .pytest_cache .ruff_cache .hypothesis gpu-kit
