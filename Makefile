# The two commands a new user runs (README): `make demo` and `make test`.
# Each creates .venv/ with what it needs, from python3 and pip alone.
PYTHON ?= python3
VENV ?= .venv
# A DSL version to install instead of the newest the range allows (CI's oldest-DSL pass).
DSL ?=
STAMP := $(VENV)/.installed

.PHONY: demo test lint gpu-check clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e '.[test]' $(DSL)
	touch $(STAMP)

# The torch-facing tests need torch; `make test` installs this one into .venv/ only where the venv
# has none (an installed torch, a CUDA build above all, is never replaced), then the `lint` extra
# (other projects' kernels for the lint's corpus; QuACK's needs torch, so it comes after it).
# Where no NVIDIA GPU is and pip brought torch's CUDA build (PyPI's Linux wheel: gigabytes of CUDA
# libraries no test can use here), it is replaced by the CPU build of the same version from the CPU
# index, which is asked only then. `make test TORCH=` runs without torch and without the extra:
# those tests then skip.
TORCH ?= torch==2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
CPU_TORCH = $(VENV)/bin/python -c "import sys, torch; sys.exit(torch.version.cuda is not None)"
# pytest-xdist processes: one a core, at most four (the GPU tests share one GPU's memory).
WORKERS ?= auto
HAS_TORCH = $(VENV)/bin/python -c "import torch" 2>/dev/null
HAS_LINT_EXTRA = $(VENV)/bin/python -c "import importlib.metadata as m; [m.version(d) for d in \
	('nvidia-cutlass-operators', 'quack-kernels', 'triton')]" 2>/dev/null
HAS_GPU = command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU

# On a machine with an NVIDIA GPU the demo needs torch and the fast launch path: the `gpu` extra.
demo: $(STAMP)
	@if $(HAS_GPU) && ! $(HAS_TORCH); then \
		echo "an NVIDIA GPU is here: installing tmakit[gpu] (torch, apache-tvm-ffi) into $(VENV)/"; \
		$(VENV)/bin/python -m pip install -q -e '.[gpu]'; fi
	$(VENV)/bin/tmakit demo

test: $(STAMP)
	@if [ -n "$(TORCH)" ] && ! $(HAS_TORCH); then \
		echo "installing $(TORCH) into $(VENV)/ for the torch-facing tests (make test TORCH= skips them)"; \
		$(VENV)/bin/python -m pip install -q '$(TORCH)' && \
		if ! $(HAS_GPU) && ! $(CPU_TORCH); then \
			echo "no NVIDIA GPU here: replacing pip's CUDA build of torch with the CPU build from $(TORCH_CPU_INDEX)"; \
			$(VENV)/bin/python -m pip install -q --force-reinstall --no-deps --index-url '$(TORCH_CPU_INDEX)' '$(TORCH)' && \
			$(CPU_TORCH) || { echo "no CPU build of $(TORCH) at $(TORCH_CPU_INDEX)" \
				"(TORCH_CPU_INDEX= names another index of CPU wheels)" >&2; exit 1; }; fi; fi
	@if [ -n "$(TORCH)" ] && ! $(HAS_LINT_EXTRA); then \
		echo "installing tmakit[lint] into $(VENV)/ for the lint's corpus of other projects' kernels"; \
		$(VENV)/bin/python -m pip install -q -e '.[lint]' $(DSL); fi
	$(VENV)/bin/ruff check src tests scripts examples benchmarks
	$(VENV)/bin/python -m pytest -q -n $(WORKERS) --maxprocesses 4

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests scripts examples benchmarks
	$(VENV)/bin/ruff format --check src tests scripts examples benchmarks

# Every GPU test (the examples included) + the demo, on a Hopper GPU: in .venv/ when it exists,
# else with the python3 that has the DSL on PYTHONPATH (docs/gpu.md). Without a GPU it says so.
# gpu-check.json goes to $OUT when set, else to a new temporary folder (the path is printed);
# `make gpu-check RESULTS=benchmarks/results` replaces the committed one.
gpu-check:
	bash scripts/gpu_check.sh $(if $(RESULTS),--out '$(RESULTS)')

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
