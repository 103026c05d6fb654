"""Accepted configurations at the edges, run and verified on the GPU: tensors of more than 2^31
elements and more than 4 GiB (where any 32-bit offset would wrap) through the tile load, the
pipelined load, every copy path and the transposing copy, and the largest grid the validation
accepts (2^31 - 1 blocks of the tile-load kernel).

    python3 scripts/gpu_edges.py --commit SHA --out DIR      # writes DIR/edges.json

Every case compares every element's bits with the position-hashed input (destinations poisoned
first); the JSON is in the one schema of benchmarks/results.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import traceback
from pathlib import Path

import torch

import tmakit
from tmakit import LoadConfig, LoadPlan, PipelinePlan
from tmakit.bench.report import device_context
from tmakit.check.inputs import make_input_tensor
from tmakit.check.run import verify_pipelined_load, verify_tile_load
from tmakit.limits import POISON
from tmakit.runtime.compile import to_cute_tensor
from tmakit.runtime.device import current_stream
from tmakit.runtime.launch import compile_tile_load

# 69,632 x 65,536 bytes: 4,563,402,752 elements (2^32 + 2^28), 4.25 GiB.
BIG = (69632, 65536)
LARGEST_GRID = (2**31 - 1, 16)  # one 1 x 16 tile per block: 2^31 - 1 blocks, 32 GiB of uint8


def big_input(shape: tuple[int, int]) -> torch.Tensor:
    return make_input_tensor(LoadPlan(LoadConfig(shape, "uint8", (16, 256))))


def poisoned(shape: tuple[int, ...]) -> torch.Tensor:
    """A compact uint8 destination, every byte the poison (all bits set)."""
    return torch.full(shape, POISON & 0xFF, dtype=torch.uint8, device="cuda")


def copy_case(bulk: bool) -> str:
    src = big_input(BIG)
    dst = poisoned(BIG)
    tmakit.copy_(dst, src, bulk=bulk)
    torch.cuda.synchronize()
    return "ok: every element bit-exact" if torch.equal(dst, src) else "MISMATCH"


def transpose_case() -> str:
    y = big_input(BIG[::-1])
    src = y.t()  # column-major (69632, 65536)
    dst = poisoned(BIG)
    tmakit.copy_(dst, src)
    torch.cuda.synchronize()
    return "ok: every element bit-exact" if torch.equal(dst, src) else "MISMATCH"


def load_case() -> str:
    verdict = verify_tile_load(LoadPlan(LoadConfig(BIG, "uint8", (64, 256))))
    return str(verdict) if verdict.ok else f"MISMATCH: {verdict}"


def pipelined_load_case() -> str:
    plan = LoadPlan(LoadConfig(BIG, "uint8", (64, 256)))
    verdict = verify_pipelined_load(PipelinePlan(plan, stages=4, persistent=True), "store", hang_guard=True)
    return str(verdict) if verdict.ok else f"MISMATCH: {verdict}"


def largest_grid_case() -> str:
    plan = LoadPlan(LoadConfig(LARGEST_GRID, "uint8", (1, 16)))
    assert plan.grid == 2**31 - 1
    src = make_input_tensor(plan)
    out = poisoned(plan.padded_shape)
    compiled = compile_tile_load(plan, consumer="store")
    compiled(to_cute_tensor(src), to_cute_tensor(out), current_stream())
    torch.cuda.synchronize()
    return f"ok: {plan.grid} blocks, every element bit-exact" if torch.equal(out, src) else "MISMATCH"


CASES = {
    "copy_ (default) 4.25 GiB uint8": copy_case,
    "copy_ bulk 4.25 GiB uint8": lambda: copy_case(bulk=True),
    "transposing copy_ 4.25 GiB uint8": transpose_case,
    "tile load 4.25 GiB uint8, 64x256 tiles": load_case,
    "pipelined load 4.25 GiB uint8, 4 stages, persistent": pipelined_load_case,
    "tile load, largest grid: 2^31-1 blocks (32 GiB uint8)": largest_grid_case,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", default="", help="comma-separated prefixes of the cases to run")
    args = parser.parse_args()
    rows = []
    for name, case in CASES.items():
        if args.only and not any(name.startswith(prefix) for prefix in args.only.split(",")):
            continue
        start = time.perf_counter()
        try:
            verdict = case()
        except Exception as error:  # noqa: BLE001 - reported per case, the next still runs
            verdict = f"ERROR: {type(error).__name__}: {error}"[:600]
            traceback.print_exc()
        torch.cuda.empty_cache()
        rows.append({"case": name, "verdict": verdict, "seconds": round(time.perf_counter() - start, 2)})
        print(f"{name}: {verdict} ({rows[-1]['seconds']} s)", flush=True)
    study = {
        "study": "edges",
        "what": "Accepted configurations at the edges, verified on every element on the GPU: tensors "
        "over 2^31 elements and 4 GiB through the tile load, the pipelined load, the copies (default, "
        "bulk, transposing), and the largest grid the validation accepts (scripts/gpu_edges.py).",
        "context": {**device_context(args.commit), "python": platform.python_version(), "step": "edges"},
        "rows": rows,
        "summary": {
            "ok": sum(row["verdict"].startswith("ok") or "correct" in row["verdict"] for row in rows)
        },
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "edges.json").write_text(json.dumps(study, indent=1) + "\n")
    return 0 if study["summary"]["ok"] == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
