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

# On a GPU machine with the DSL on PYTHONPATH (see docs/gpu.md): every GPU test + the demo.
gpu-check:
	bash scripts/gpu_check.sh

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
