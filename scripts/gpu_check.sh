#!/usr/bin/env bash
# On the GPU machine, after `source .cutedsl/activate.sh`: GPU tests + demo -> $OUT/gpu-check-*.json
set -euo pipefail
cd "$(dirname "$0")/.."
commit=${TMAKIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
python3 scripts/gpu_check.py --commit "$commit" --out "${OUT:-benchmarks/results}"
