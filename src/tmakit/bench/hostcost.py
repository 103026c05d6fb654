"""Host microseconds per call: `tmakit.copy_` and its parts beside torch's own calls, and plain
compiled calls, all timed interleaved (`timing.host_costs_us`). The families' functions and their
building blocks (the copy's `plan_copy` and `specialised_copy_`, the reduce's planner) are read
through `registry.exporting`."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

from .. import registry
from ..check.inputs import make_input_tensor
from ..config import LoadConfig
from ..plan import CopyOptions, LoadPlan
from ..runtime.compile import to_cute_tensor
from ..runtime.device import current_stream
from .report import device_context
from .timing import host_costs_us, host_launch_us


def measure_copy_host_cost(transpose: bool = False) -> dict:
    """Host microseconds per `tmakit.copy_` call on a tiny tensor, the configuration repeated
    call after call (what a user's loop pays: the whole public call, its launcher tried first);
    beside it the parts and variants of that call (alternating configurations pay the full
    lookup and alignment check) and torch's own calls, all timed interleaved."""
    import torch

    copies = registry.exporting("copy_")  # the copy family's api: copy_, copy and plan_copy
    x = torch.randn(256, 512, device="cuda").to(torch.float16)
    src = x.t() if transpose else x
    dst = torch.empty(src.shape, dtype=src.dtype, device="cuda")
    prefix = f"tmakit_copy_{'transpose_' if transpose else ''}"
    launches = {}
    # The default copy, without PDL (a plain launch), and (same layout) the bulk copy, whose
    # launch encodes no tensor maps: what each part of the launch costs.
    variants = {"": {}, "no_pdl_": {"pdl": False}}
    if not transpose:
        variants.update({"bulk_": {"bulk": True}, "bulk_no_pdl_": {"bulk": True, "pdl": False}})
    for label, knobs in variants.items():
        copies.copy_(dst, src, **knobs)
        launcher = copies.plan_copy(dst, src, CopyOptions(**knobs))  # the compiled launch this call looks up
        launches[f"{prefix}{label}call_us"] = lambda k=knobs: copies.copy_(dst, src, **k)
        # The launcher alone (tmakit's closure around the compiled TVM-FFI function).
        launches[f"{prefix}{label}compiled_launch_us"] = lambda f=launcher.launch: f(dst, src)
    # `tmakit.copy`: a new tensor each call, then the copy.
    launches[f"{prefix}new_tensor_call_us"] = lambda: copies.copy(src)
    # A caller alternating between two configurations (per copy: half of each call here).
    other_src = torch.empty(tuple(s + 16 for s in src.shape), dtype=src.dtype, device="cuda")
    other_src = other_src.t().contiguous().t() if transpose else other_src
    other_dst = torch.empty(other_src.shape, dtype=src.dtype, device="cuda")
    copies.copy_(other_dst, other_src)
    launches[f"{prefix}alternating_pair_us"] = lambda: (
        copies.copy_(dst, src),
        copies.copy_(other_dst, other_src),
    )
    # What torch's own calls cost the host, for scale.
    launches[f"torch_copy_{'transpose_' if transpose else ''}call_us"] = lambda: dst.copy_(src)
    launches["torch_clone_call_us"] = lambda: src.clone()
    launches["torch_empty_like_us"] = lambda: torch.empty_like(src)
    launches["torch_empty_strided_us"] = lambda: torch.empty_strided(
        src.size(), src.stride(), dtype=src.dtype, device=src.device
    )
    # The same copies through the torch operators (tmakit.ops): torch's dispatcher and one
    # Python kernel on top of tmakit.copy_.
    from .. import ops as tmakit_ops  # noqa: F401  # registers torch.ops.tmakit (imports torch)

    op_copy_, op_copy = torch.ops.tmakit.copy_.default, torch.ops.tmakit.copy.default
    op_copy_(dst, src)
    op_copy(src)
    op_typed = torch.ops.tmakit.copy_.typed
    op_typed(dst, src, stages=4)
    launches[f"{prefix}op_call_us"] = lambda: op_copy_(dst, src)
    launches[f"{prefix}op_new_tensor_call_us"] = lambda: op_copy(src)
    launches[f"{prefix}op_typed_call_us"] = lambda: op_typed(dst, src, stages=4)
    noop = noop_op()
    launches[f"{prefix}noop_op_call_us"] = lambda: noop(dst, src)
    result = host_costs_us(launches)
    result[f"{prefix}alternating_call_us"] = result.pop(f"{prefix}alternating_pair_us") / 2
    return result


_KEPT: list = []


@functools.cache
def noop_op() -> Any:
    """An op of copy_'s schema whose Python kernel does nothing: the floor of any op with a Python
    kernel under torch's dispatcher, timed beside tmakit's (the library lives as long as the cache)."""
    import torch

    library = torch.library.Library("tmakit_bench", "DEF")
    library.define('noop(Tensor(a0!) dst, Tensor src, str options="") -> ()')
    library.impl("noop", lambda dst, src, options="": None, "CompositeExplicitAutograd")
    _KEPT.append(library)  # dropping the library would unregister the op
    return torch.ops.tmakit_bench.noop.default


def measure_ops_host_cost() -> dict:
    """Host microseconds per repeated call of the other public ops on tiny tensors (TMA's paths),
    each beside torch's equivalent, all timed interleaved: `add_` and `dst.add_(src)`; `im2col`
    into an `out` and torch's expression of it (the im2col family's `strided_patches`, read through
    `registry.exporting`: `F.pad` + `as_strided` into the same `out`), and `im2col` allocating;
    `load_tiles` (the load family's) and torch's `clone`; each op through torch.ops.tmakit too
    (`reduce_into_`, `im2col`, `load_tiles`), beside its direct call."""
    import torch

    from .. import ops as tmakit_ops  # noqa: F401  # registers torch.ops.tmakit (imports torch)

    reduce = registry.exporting("add_")  # the reduce family's api: add_ and its planner
    dst, src = torch.randn(256, 512, device="cuda"), torch.randn(256, 512, device="cuda")
    x = torch.randn(4, 16, 16, 64, device="cuda").to(torch.float16)
    im2col = registry.exporting("im2col")
    load_tiles = registry.exporting("load_tiles").load_tiles
    conv = im2col.im2col_conv(tuple(x.shape), 3, 1, 1)
    patches = torch.empty(conv.patch_shape, dtype=x.dtype, device="cuda")
    tiles = torch.randn(64, 256, device="cuda").to(torch.float16)
    launches = {
        "tmakit_add_call_us": lambda: reduce.add_(dst, src),
        "torch_add_call_us": lambda: dst.add_(src),
        "tmakit_im2col_call_us": lambda: im2col.im2col(x, 3, 1, 1, out=patches),
        "torch_im2col_call_us": lambda: im2col.strided_patches(x, conv, patches),
        "tmakit_im2col_new_tensor_call_us": lambda: im2col.im2col(x, 3, 1, 1),
        "tmakit_load_tiles_call_us": lambda: load_tiles(tiles),
        "torch_clone_call_us": lambda: tiles.clone(),
        "tmakit_add_op_call_us": lambda: torch.ops.tmakit.reduce_into_.default(dst, src),
        "tmakit_im2col_op_call_us": lambda: torch.ops.tmakit.im2col.default(x, [3, 3], [1, 1], [1, 1]),
        "tmakit_load_tiles_op_call_us": lambda: torch.ops.tmakit.load_tiles.default(tiles),
    }
    for launch in launches.values():
        launch()  # compiled now
    # The add's compiled launch alone, as the copy's: what its call adds on top (the one launcher
    # its dispatch found, for these tensors).
    (add_launcher,) = reduce.reduce_dispatch("add", False, {}).launchers()
    add_launch = add_launcher.launch
    launches["tmakit_add_compiled_launch_us"] = lambda: add_launch(dst, src)
    return host_costs_us(launches)


HOST_COST_WHAT = (
    "Host microseconds per call, configuration seen before: back-to-back calls of a tiny copy, median of "
    "7 rounds that interleave every variant; tmakit.copy_ / tmakit.copy and their parts (compiled launch "
    "alone, no PDL, bulk, alternating configurations) beside torch's copy_/clone/empty, for a plain and a "
    "transposing copy; group 'plain': one seed-kernel call with prepared CuTe tensors, from_dlpack each "
    "call, and TVM-FFI; group 'new_shape': every call a shape never seen in a compiled class, beside the "
    "repeated call and the shape-specialised kernel's repeated call; group 'first_call': a fresh process's "
    "first copy_ with a cold and a warm disk cache (seconds), the imports of the DSL and of tvm_ffi (its "
    "TVM-FFI calling path) apart; op_*: the same calls through torch.ops.tmakit. "
    "(op_typed: copy_'s typed overload with stages=4; noop_op: an op of copy_'s schema whose Python "
    "kernel does nothing, the dispatcher's floor); group 'ops': add_, im2col and load_tiles "
    "beside torch's add_, its im2col expression (F.pad + as_strided) and clone, and each through "
    "torch.ops.tmakit (op_call: reduce_into_, im2col allocating, load_tiles)."
)


def host_cost_study(context: dict, groups: dict[str, dict[str, float]]) -> dict:
    """The host-cost study in the one schema of benchmarks/results: a row per (group, key, us)."""
    rows = [
        {"group": group, "key": key, "us": us} for group, costs in groups.items() for key, us in costs.items()
    ]
    return {"study": "host-cost", "what": HOST_COST_WHAT, "context": context, "rows": rows, "summary": {}}


def measure_new_shape_host_cost() -> dict:
    """Host microseconds per `tmakit.copy_` call when every call is a shape never seen before, in
    a class already compiled (fp16, row-major, 2-D: views of 8,000 shapes over one buffer), the
    new shape's checks included; beside it the same class's repeated call (one shape, call after
    call), the shape-specialised kernel's repeated call (the launcher tried first without reading
    the tensors: the path before shape-generic kernels) and torch's copy_, interleaved; and the
    new shape's parts: its checks alone, the compiled launch alone on new shapes and on one."""
    import torch

    copies = registry.exporting("copy_")  # the copy family's api: copy_, plan_copy, specialised_copy_
    source = torch.randn(1000, 64, device="cuda").to(torch.float16)
    target = torch.empty_like(source)
    shapes = [(rows, cols) for cols in range(8, 72, 8) for rows in range(1, 1001)]  # 8,000
    pairs = [(target[:rows, :cols], source[:rows, :cols]) for rows, cols in shapes]
    copies.copy_(*pairs[-1])  # the class compiled (or loaded from disk)
    fresh = iter(pairs[:-1] * 2)  # the table of seen shapes holds 4,096: a second pass is new again
    fresh_checks, fresh_launches = iter(pairs[:-1] * 2), iter(pairs[:-1] * 2)
    src, dst = source[:256, :64], target[:256, :64]
    copies.specialised_copy_(dst, src)
    options = CopyOptions()
    class_launch = copies.plan_copy(dst, src, options).launch  # the class's compiled launch, no checks

    def launch_fresh() -> None:
        fresh_dst, fresh_src = next(fresh_launches)
        class_launch(fresh_dst, fresh_src)

    launches = {
        "new_shape_call_us": lambda: copies.copy_(*next(fresh)),
        # Its parts: a new shape's checks alone (`plan_copy`, nothing launched) and the class's
        # compiled launch alone, on new shapes and on one shape.
        "new_shape_checks_us": lambda: copies.plan_copy(*next(fresh_checks), options),
        "new_shape_launch_us": launch_fresh,
        "repeated_launch_us": lambda: class_launch(dst, src),
        "repeated_call_us": lambda: copies.copy_(dst, src),
        "specialised_repeated_call_us": lambda: copies.specialised_copy_(dst, src),
        "torch_copy_call_us": lambda: dst.copy_(src),
    }
    result = host_costs_us(launches, calls=1000, repeats=7)
    result["new_shape_over_repeated"] = result["new_shape_call_us"] / result["repeated_call_us"]
    result["repeated_over_specialised"] = result["repeated_call_us"] / result["specialised_repeated_call_us"]
    return result


FIRST_CALL_SCRIPT = """
import json, os, sys, time
start = time.perf_counter()
import torch
x = torch.randn(777, 1000, device="cuda").to(torch.float16)
y = torch.empty_like(x)
torch.cuda.synchronize()
torch_s = time.perf_counter() - start
start = time.perf_counter()
import cutlass, cutlass.cute
dsl_s = time.perf_counter() - start
start = time.perf_counter()
import tvm_ffi  # the DSL's TVM-FFI calling path: imported by the DSL's loader on first use
tvm_ffi_s = time.perf_counter() - start
start = time.perf_counter()
import tmakit
tmakit_s = time.perf_counter() - start
profile = os.environ.get("TMAKIT_PROFILE_FIRST_CALL")
if profile:
    import cProfile
    profiler = cProfile.Profile()
    profiler.enable()
start = time.perf_counter()
tmakit.copy_(y, x)
torch.cuda.synchronize()
first_s = time.perf_counter() - start
if profile:
    import io, pstats
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(25)
    print(text.getvalue(), file=sys.stderr)
assert torch.equal(x, y)
# The parts of a first call, timed again in a second class (the transposing copy of x.t()):
# tmakit's kernel modules are imported by now, so these are the class's own costs.
t = x.t()
z = tmakit.padded_empty(tuple(t.shape), t.dtype)
start = time.perf_counter()
launcher = tmakit.copies.api.plan_copy(z, t, tmakit.CopyOptions())
plan_s = time.perf_counter() - start
start = time.perf_counter()
launcher(z, t)
torch.cuda.synchronize()
launch_s = time.perf_counter() - start
compiled = tmakit.copies.api.plan_copy(y, x, tmakit.CopyOptions()).compiled
print(json.dumps({"import_torch_and_tensors_s": torch_s, "import_dsl_s": dsl_s, "import_tvm_ffi_s": tvm_ffi_s,
                  "import_tmakit_s": tmakit_s,
                  "first_copy_s": first_s, "from_disk": compiled.from_disk,
                  "compile_or_load_s": compiled.compile_seconds,
                  "second_class_plan_and_load_s": plan_s, "second_class_first_launch_s": launch_s}))
"""


def measure_first_call(cache_dir: str) -> dict:
    """A fresh process that has imported torch and holds CUDA tensors: the first `tmakit.copy_`
    with an empty disk cache (a new class's compile) and then, in another fresh process, with
    that cache warm; the DSL's own import time reported apart."""
    env = {**os.environ, "TMAKIT_CACHE_DIR": cache_dir}
    runs = {}
    for label in ("cold_disk_cache", "warm_disk_cache", "profiled"):
        done = subprocess.run(
            [sys.executable, "-c", FIRST_CALL_SCRIPT],
            env={**env, "TMAKIT_PROFILE_FIRST_CALL": "1"} if label == "profiled" else env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode:
            runs[f"{label}_error"] = done.stderr[-600:]
            continue
        if label == "profiled":  # where a warm first call spends its time (cProfile, cumulative)
            print(done.stderr[-6000:], file=sys.stderr)
            continue
        for key, value in json.loads(done.stdout.strip().splitlines()[-1]).items():
            runs[f"{label}_{key}"] = value
    return runs


def host_cost_report(commit: str | None) -> dict:
    """What `scripts/device_run.sh hostcost` writes: the host cost of copies and transposing
    copies (`measure_copy_host_cost`), of new shapes in a compiled class, of a fresh process's
    first copy, and of plain compiled calls, with the device context."""
    with tempfile.TemporaryDirectory(prefix="tmakit-first-call-") as cache_dir:
        first_call = measure_first_call(cache_dir)
    groups = {
        "copy": measure_copy_host_cost(),
        "transpose": measure_copy_host_cost(transpose=True),
        "ops": measure_ops_host_cost(),
        "new_shape": measure_new_shape_host_cost(),
        "first_call": first_call,
        "plain": measure_host_overhead(),
    }
    return host_cost_study({**device_context(commit), "step": "hostcost"}, groups)


def measure_host_overhead() -> dict:
    """Host microseconds per call of a compiled tiny load kernel (the load family's tile load), by
    the plain path and, when the apache-tvm-ffi package is importable, by the DSL's TVM-FFI path
    (the compiled functions called directly in both)."""
    compile_tile_load = registry.exporting("compile_tile_load", "launch").compile_tile_load
    plan = LoadPlan(LoadConfig((64, 256)))
    src = make_input_tensor(plan)
    plain = compile_tile_load(plan, consumer="none").function
    stream = current_stream()
    prepared = to_cute_tensor(src)
    result = {
        "plain_prepared_tensors_us": host_launch_us(lambda: plain(prepared, prepared, stream)),
        "plain_from_dlpack_each_call_us": host_launch_us(
            lambda: plain(to_cute_tensor(src), to_cute_tensor(src), stream)
        ),
    }
    try:
        ffi = compile_tile_load(plan, consumer="none", tvm_ffi=True).function
        result["tvm_ffi_torch_tensors_us"] = host_launch_us(lambda: ffi(src, src))  # torch's stream
    except Exception as error:  # noqa: BLE001 - reported, the plain path still stands
        result["tvm_ffi_error"] = f"{type(error).__name__}: {error}"[:300]
    return result
