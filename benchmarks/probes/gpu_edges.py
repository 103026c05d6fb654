"""Configurations at the edges, run and verified on the GPU, each case in its own process (a fault
ends only it): tensors of just under and just over 2^31 elements, and over 4 GiB (byte offsets past
2^32), through the tile load, the pipelined load, every copy path and the transposing copy, and a
grid of 2^27 - 1 blocks and the largest grid the validation accepts, 2^31 - 1 blocks.

    python3 benchmarks/probes/gpu_edges.py --commit SHA --out DIR      # writes DIR/edges.json

Every case compares every element's bits with the position-hashed input (destinations poisoned
first); the JSON is in the one schema of benchmarks/results.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

import tmakit
from tmakit import LoadConfig, LoadPlan, PipelinePlan
from tmakit.bench.report import device_context
from tmakit.check.inputs import make_input_tensor
from tmakit.config import DTYPES
from tmakit.limits import POISON
from tmakit.load.check import verify_pipelined_load, verify_tile_load
from tmakit.load.launch import compile_tile_load
from tmakit.runtime.compile import to_cute_tensor
from tmakit.runtime.device import current_stream


def big_input(shape: tuple[int, ...], dtype: str) -> torch.Tensor:
    return make_input_tensor(LoadPlan(LoadConfig(shape, dtype, (16, 16))))


def poisoned_like(tensor: torch.Tensor) -> torch.Tensor:
    """A compact destination of `tensor`'s shape and dtype, every bit set (the poison)."""
    out = torch.empty(tuple(tensor.shape), dtype=tensor.dtype, device="cuda")
    out.view(torch.uint8).fill_(POISON & 0xFF)
    return out


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.view(torch.uint8), b.contiguous().view(torch.uint8))


def copy_case(shape: tuple[int, int], dtype: str, **options) -> str:
    src = big_input(shape, dtype)
    dst = poisoned_like(src)
    tmakit.copy_(dst, src, **options)
    torch.cuda.synchronize()
    return "ok: every element bit-exact" if same_bits(dst, src) else "MISMATCH"


def transpose_case(shape: tuple[int, int], dtype: str) -> str:
    src = big_input(shape[::-1], dtype).t()  # column-major
    dst = poisoned_like(src)
    tmakit.copy_(dst, src)
    torch.cuda.synchronize()
    return "ok: every element bit-exact" if same_bits(dst, src) else "MISMATCH"


def load_case(shape: tuple[int, int], dtype: str, stages: int = 1) -> str:
    plan = LoadPlan(LoadConfig(shape, dtype, (64, 256 if DTYPES[dtype].nbytes == 1 else 64)))
    if stages == 1:
        verdict = verify_tile_load(plan)
    else:
        verdict = verify_pipelined_load(PipelinePlan(plan, stages, persistent=True), "store", hang_guard=True)
    return str(verdict) if verdict.ok else f"MISMATCH: {verdict}"


def grid_case(rows: int) -> str:
    """`rows` blocks of one 1 x 16 uint8 tile through the tile load compiled for this shape."""
    return specialised_tile_load_case(LoadPlan(LoadConfig((rows, 16), "uint8", (1, 16))))


def large_tile_case() -> str:
    """2^33 bytes through the tile load compiled for this shape, with a small grid."""
    return specialised_tile_load_case(LoadPlan(LoadConfig((65536, 131072), "uint8", (64, 256))))


def specialised_tile_load_case(plan: LoadPlan) -> str:
    src = make_input_tensor(plan)
    out = poisoned_like(src)
    compiled = compile_tile_load(plan, consumer="store")
    compiled(to_cute_tensor(src), to_cute_tensor(out), current_stream())
    torch.cuda.synchronize()
    return rows_verdict(out, src, plan.grid)


def load_tiles_grid_case(rows: int) -> str:
    """The same grid through `tmakit.load_tiles` (the shape-generic kernel, TVM-FFI launch)."""
    plan = LoadPlan(LoadConfig((rows, 16), "uint8", (1, 16)))
    src = make_input_tensor(plan)
    out = tmakit.load_tiles(src, (1, 16))
    torch.cuda.synchronize()
    return rows_verdict(out, src, plan.grid)


def rows_verdict(out: torch.Tensor, src: torch.Tensor, blocks: int) -> str:
    """ok, or which rows of a 2-D uint8 result differ from the source's."""
    if same_bits(out, src):
        return f"ok: {blocks} blocks, every element bit-exact"
    wrong_rows = (out.view(torch.uint8) != src.view(torch.uint8)).any(dim=1).nonzero()[:, 0]
    first, last = int(wrong_rows[0]), int(wrong_rows[-1])
    return f"MISMATCH: {len(wrong_rows)} of {len(src)} rows wrong, the first {first}, the last {last}"


UNDER = (32767, 65536)  # uint8: 2^31 - 2^16 elements, 2 GiB
OVER = (32769, 65536)  # uint8: 2^31 + 2^16 elements
WIDE = (17408, 65536)  # fp32: 2^30 + 2^26 elements, 4.25 GiB: byte offsets past 2^32
CASES = {
    "copy_ uint8, 2^31 - 2^16 elements (2 GiB)": lambda: copy_case(UNDER, "uint8"),
    "copy_ uint8, 2^31 + 2^16 elements": lambda: copy_case(OVER, "uint8"),
    "copy_ fp32, 2^30 + 2^26 elements (4.25 GiB)": lambda: copy_case(WIDE, "fp32"),
    "copy_ bulk fp32, 4.25 GiB": lambda: copy_case(WIDE, "fp32", bulk=True),
    "transposing copy_ fp32, 4.25 GiB": lambda: transpose_case(WIDE, "fp32"),
    "tile load fp32, 4.25 GiB": lambda: load_case(WIDE, "fp32"),
    "pipelined load fp32, 4.25 GiB, 4 stages": lambda: load_case(WIDE, "fp32", stages=4),
    "tile load uint8, 2^31 + 2^16 elements": lambda: load_case(OVER, "uint8"),
    "tile load, 2^27 - 1 blocks of one 1 x 16 tile": lambda: grid_case(2**27 - 1),
    "tile load, 2^31 - 1 blocks of one 1 x 16 tile (the largest grid, 32 GiB)": lambda: grid_case(2**31 - 1),
    "tile load, 2^28 blocks of one 1 x 16 tile": lambda: grid_case(2**28),
    "tile load, 2^29 blocks of one 1 x 16 tile": lambda: grid_case(2**29),
    "tile load, 2^30 blocks of one 1 x 16 tile": lambda: grid_case(2**30),
    "tile load, 2^31 - 2^24 blocks of one 1 x 16 tile": lambda: grid_case(2**31 - 2**24),
    "load_tiles (shape-generic), 2^30 blocks of one 1 x 16 tile": lambda: load_tiles_grid_case(2**30),
    "tile load uint8, 8 GiB in 1024 blocks of 64 x 256 tiles": lambda: large_tile_case(),
    "load_tiles (shape-generic), 2^31 - 1 blocks (32 GiB)": lambda: load_tiles_grid_case(2**31 - 1),
}


def run_one(name: str) -> None:
    """Child process: run one case, print its verdict as the last line (a fault kills only it).
    A configuration the validation refuses is a verdict too: refused before anything ran."""
    try:
        verdict = CASES[name]()
    except tmakit.TmaConfigError as error:
        verdict = f"refused before compiling: {error}"[:500]
    except Exception as error:  # noqa: BLE001 - the verdict says what happened
        verdict = f"ERROR: {type(error).__name__}: {error}"[:500]
    print("VERDICT " + verdict, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", default="", help="comma-separated prefixes of the cases to run")
    parser.add_argument("--timeout", type=float, default=150.0, help="seconds per case")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # the child process's one case
    args = parser.parse_args()
    if args.case:
        run_one(args.case)
        return 0
    rows = []
    for name in CASES:
        if args.only and not any(name.startswith(prefix) for prefix in args.only.split(",")):
            continue
        start = time.perf_counter()
        command = [sys.executable, __file__, "--commit", args.commit, "--out", args.out, "--case", name]
        try:
            child = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
            verdicts = [line[8:] for line in child.stdout.splitlines() if line.startswith("VERDICT ")]
            verdict = verdicts[-1] if verdicts else f"ERROR: the process died: {child.stderr[-400:]}"
        except subprocess.TimeoutExpired:
            verdict = f"ERROR: no verdict within {args.timeout} s"
        rows.append({"case": name, "verdict": verdict, "seconds": round(time.perf_counter() - start, 2)})
        print(f"{name}: {verdict} ({rows[-1]['seconds']} s)", flush=True)
    study = {
        "study": "edges",
        "what": "Accepted configurations at the edges, verified on every element on the GPU: tensors "
        "over 2^31 elements and 4 GiB through the tile load, the pipelined load, the copies (default, "
        "bulk, transposing), and the largest grid the validation accepts (benchmarks/probes/gpu_edges.py).",
        "context": {**device_context(args.commit), "python": platform.python_version(), "step": "edges"},
        "rows": rows,
        "summary": {
            "ok": sum(
                row["verdict"].startswith(("ok", "refused")) or "correct" in row["verdict"] for row in rows
            )
        },
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "edges.json").write_text(json.dumps(study, indent=1) + "\n")
    return 0 if study["summary"]["ok"] == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
