#!/usr/bin/env bash
# Every GPU test (the examples included) + `tmakit demo` -> gpu-check.json in $OUT, else in a new
# temporary folder (scripts/gpu_check.py); `--out DIR` names the folder (`--out benchmarks/results`
# replaces the committed file). Runs in the project's environment, .venv/, when there is one (`make`
# creates it); else with python3 (the GPU machine, after `source .cutedsl/activate.sh`).
# TMAKIT_PYTHON names another interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${TMAKIT_PYTHON:-}
if [ -z "$python" ]; then
    if [ -x .venv/bin/python ]; then python=.venv/bin/python; else python=python3; fi
fi
commit=${TMAKIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
exec "$python" scripts/gpu_check.py --commit "$commit" "$@"
