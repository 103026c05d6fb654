"""Diagnostics for pipelined loads on the GPU (one configuration per subprocess)."""

import subprocess
import sys

CASES = {
    "batched-padded-store": "LoadConfig((2, 1000, 777), 'bf16', (64, 64), 128, strides=padded_strides((2, 1000, 777), 2))",
    "batched-padded-noswz": "LoadConfig((2, 1000, 777), 'bf16', (64, 64), 0, strides=padded_strides((2, 1000, 777), 2))",
    "2d-padded-store": "LoadConfig((1000, 777), 'bf16', (64, 64), 128, strides=padded_strides((1000, 777), 2))",
    "2d-compact-partial": "LoadConfig((1000, 768), 'bf16', (64, 64), 128)",
    "col-store": "LoadConfig((777, 1000), 'fp16', (128, 16), 32, 'col', padded_strides((777, 1000), 2, 'col'))",
}
BODY = """
from tmakit import LoadConfig, LoadPlan, SEED
from tmakit.plan import PipelinePlan
from tmakit.sweep import padded_strides
from tmakit.pipelines import verify_pipelined_load
from tmakit.loads import verify_tile_load
config = {config}
print("tile_load:", verify_tile_load(LoadPlan(config)))
print("pipeline:", verify_pipelined_load(PipelinePlan(LoadPlan(config), stages=3), "store", {knobs}))
"""
for name, config in CASES.items():
    for knobs in ("hang_guard=False", "hang_guard=True"):
        r = subprocess.run([sys.executable, "-c", BODY.format(config=config, knobs=knobs)], capture_output=True, text=True, timeout=60)
        print(name, knobs, r.stdout.strip(), r.stderr.strip()[-600:])
for extra in ("hang_guard=True, expect_extra_bytes=16", "hang_guard=True, freeze_parity=True"):
    body = BODY.format(config="SEED", knobs=extra).replace("stages=3", "stages=1")
    r = subprocess.run([sys.executable, "-c", body], capture_output=True, text=True, timeout=90)
    print(extra, r.stdout.strip(), r.stderr.strip()[-900:])
