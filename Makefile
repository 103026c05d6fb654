# The two commands a new user runs (README): `make demo` and `make test`.
# Each creates .venv/ with what it needs, from python3 and pip alone.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test lint gpu-check clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/tmakit demo

test: $(STAMP)
	$(VENV)/bin/ruff check src tests scripts examples
	$(VENV)/bin/python -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests scripts examples
	$(VENV)/bin/ruff format --check src tests scripts examples

# Every GPU test (the examples included) + the demo, on a Hopper GPU: in .venv/ when it exists,
# else with the python3 that has the DSL on PYTHONPATH (docs/gpu.md). Without a GPU it says so.
gpu-check:
	bash scripts/gpu_check.sh

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
