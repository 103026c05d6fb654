"""Where the host time of tmakit's torch ops goes, against their direct calls (GPU host): the
dispatcher's floor (an op of `copy_`'s schema whose Python kernel does nothing), the compiled
launch alone outside and inside an op (registered for CompositeExplicitAutograd, as tmakit's
ops are, and for the CUDA key), each op beside its kernel called directly and its API call, and
three pure-Python calibrations to compare hosts by.

    python benchmarks/probes/op_path_probe.py --commit SHA --json OUT

Each call runs back to back (300 calls a round, after 20 warm-up calls), 9 rounds; the JSON holds
each call's median microseconds per call and the ratios its summary derives.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import tmakit
import tmakit.ops  # noqa: F401  registers the ops
from tmakit import ops_base
from tmakit.bench.report import device_context
from tmakit.copies import api as copies_api
from tmakit.copies import op as copies_op
from tmakit.patches import op as im2col_op
from tmakit.plan import CopyOptions

ROUNDS, CALLS, WARM_UP = 9, 300, 20


def cases() -> tuple[dict[str, tuple[str, object]], torch.library.Library]:
    """name -> (what it is, the call), and the library of the probe's ops (which must outlive them)."""
    dst, src = torch.randn(256, 512, device="cuda"), torch.randn(256, 512, device="cuda")
    x = torch.randn(4, 16, 16, 64, device="cuda").to(torch.float16)
    tiles = torch.randn(64, 256, device="cuda").to(torch.float16)
    launcher = copies_api.plan_copy(dst, src, CopyOptions())
    library = torch.library.Library("op_path_probe", "DEF")
    kernels = {
        "noop_": lambda d, s, options="": None,
        "launch_": lambda d, s, options="": launcher(d, s),
        "cuda_noop_": lambda d, s, options="": None,
        "cuda_launch_": lambda d, s, options="": launcher(d, s),
    }
    for name, kernel in kernels.items():
        library.define(f"{name}(Tensor(a0!) dst, Tensor src, str options='') -> ()")
        library.impl(name, kernel, "CUDA" if name.startswith("cuda") else "CompositeExplicitAutograd")
    probe = torch.ops.op_path_probe
    calls = {
        "launcher_direct": ("the compiled TVM-FFI launch of the copy alone", lambda: launcher(dst, src)),
        "noop_op": (
            "an op of copy_'s schema whose kernel does nothing",
            lambda: probe.noop_.default(dst, src),
        ),
        "launch_op": ("that op's kernel calling the launch alone", lambda: probe.launch_.default(dst, src)),
        "cuda_noop_op": ("the no-op registered for CUDA", lambda: probe.cuda_noop_.default(dst, src)),
        "cuda_launch_op": ("the launch-only op for CUDA", lambda: probe.cuda_launch_.default(dst, src)),
        "py_calib_sum50": ("Python: sum(range(50))", lambda: sum(range(50))),
        "py_calib_shapes": (
            "Python: two tensors' shapes and strides compared",
            lambda: (
                (src.shape, src.stride(), dst.shape, dst.stride())
                == (dst.shape, dst.stride(), src.shape, src.stride())
            ),
        ),
        "py_calib_ptrs": (
            "Python: two data_ptr(), is_neg(), requires_grad",
            lambda: (src.data_ptr(), dst.data_ptr(), src.is_neg(), dst.requires_grad),
        ),
        "bump": ("one version counter bumped", lambda: ops_base.increment_versions((dst,))),
        "copy_direct": ("tmakit.copy_(dst, src)", lambda: tmakit.copy_(dst, src)),
        "copy_dispatch_strict": (
            "the strict copy dispatch (what the op's kernel calls)",
            lambda: copies_op.STRICT_COPIES.copy_(dst, src, None, None, ops_base.NO_OPTIONS),
        ),
        "copy_impl": ("the op's kernel called directly", lambda: copies_op.copy__impl(dst, src)),
        "copy_op": ("torch.ops.tmakit.copy_", lambda: torch.ops.tmakit.copy_.default(dst, src)),
        "add_direct": ("tmakit.add_(dst, src)", lambda: tmakit.add_(dst, src)),
        "add_impl": ("the op's kernel called directly", lambda: tmakit.reduce.op.reduce_into__impl(dst, src)),
        "add_op": ("torch.ops.tmakit.reduce_into_", lambda: torch.ops.tmakit.reduce_into_.default(dst, src)),
        "im2col_direct": ("tmakit.im2col(x, 3, 1, 1)", lambda: tmakit.im2col(x, 3, 1, 1)),
        "im2col_impl": (
            "the op's kernel called directly",
            lambda: im2col_op.im2col_impl(x, [3, 3], [1, 1], [1, 1]),
        ),
        "im2col_op": (
            "torch.ops.tmakit.im2col",
            lambda: torch.ops.tmakit.im2col.default(x, [3, 3], [1, 1], [1, 1]),
        ),
        "load_tiles_direct": ("tmakit.load_tiles(tiles)", lambda: tmakit.load_tiles(tiles)),
        "load_tiles_op": ("torch.ops.tmakit.load_tiles", lambda: torch.ops.tmakit.load_tiles.default(tiles)),
        "copy_new_direct": ("tmakit.copy(src)", lambda: tmakit.copy(src)),
        "copy_new_op": ("torch.ops.tmakit.copy", lambda: torch.ops.tmakit.copy.default(src)),
    }
    return calls, library


def median_us(calls: dict[str, tuple[str, object]]) -> dict[str, float]:
    for _, call in calls.values():
        for _ in range(WARM_UP):
            call()
    torch.cuda.synchronize()
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(ROUNDS):  # rounds interleave the calls: a slow moment hits them all
        for name, (_, call) in calls.items():
            start = time.perf_counter()
            for _ in range(CALLS):
                call()
            samples[name].append((time.perf_counter() - start) / CALLS * 1e6)
            torch.cuda.synchronize()
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", default=None)
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    calls, _library = cases()
    us = median_us(calls)
    rows = [{"call": name, "what": what, "us": us[name]} for name, (what, _) in calls.items()]
    summary = {
        "dispatcher_floor_us": us["noop_op"],
        "launch_inside_an_op_extra_us": us["launch_op"] - us["noop_op"] - us["launcher_direct"],
        "copy_op_over_direct": us["copy_op"] / us["copy_direct"],
        "copy_op_floor_over_direct": (us["copy_direct"] + us["noop_op"]) / us["copy_direct"],
        "copy_op_extra_over_floor_us": us["copy_op"] - us["copy_impl"] - us["noop_op"],
        "add_op_over_direct": us["add_op"] / us["add_direct"],
    }
    report = {
        "study": "op-path",
        "what": __doc__.split("\n\n")[0].replace("\n", " "),
        "context": {**device_context(args.commit), "rounds": ROUNDS, "calls_a_round": CALLS},
        "rows": rows,
        "summary": summary,
    }
    with open(args.json, "w") as out:
        json.dump(report, out, indent=1)
    for row in rows:
        print(f"{row['call']:24s} {row['us']:7.2f} us")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
