"""Host microseconds per call: `tmakit.copy_` and its parts beside torch's own calls, and plain
compiled calls, all timed interleaved (`timing.host_costs_us`)."""

from __future__ import annotations

from .. import api
from ..check.inputs import make_input_tensor
from ..config import LoadConfig
from ..plan import CopyOptions, LoadPlan
from ..runtime.compile import to_cute_tensor
from ..runtime.device import current_stream
from ..runtime.launch import compile_tile_load
from .report import device_context
from .timing import host_costs_us, host_launch_us


def measure_copy_host_cost(transpose: bool = False) -> dict:
    """Host microseconds per `tmakit.copy_` call on a tiny tensor, the configuration repeated
    call after call (what a user's loop pays: the whole public call, its launcher tried first);
    beside it the parts and variants of that call (alternating configurations pay the full
    lookup and alignment check) and torch's own calls, all timed interleaved."""
    import torch

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
        api.copy_(dst, src, **knobs)
        launcher = api.plan_copy(dst, src, CopyOptions(**knobs))  # the compiled launch this call looks up
        launches[f"{prefix}{label}call_us"] = lambda k=knobs: api.copy_(dst, src, **k)
        # The launcher alone (tmakit's closure around the compiled TVM-FFI function).
        launches[f"{prefix}{label}compiled_launch_us"] = lambda f=launcher: f(src, dst)
    # `tmakit.copy`: a new tensor each call, then the copy.
    launches[f"{prefix}new_tensor_call_us"] = lambda: api.copy(src)
    # A caller alternating between two configurations (per copy: half of each call here).
    other_src = torch.empty(tuple(s + 16 for s in src.shape), dtype=src.dtype, device="cuda")
    other_src = other_src.t().contiguous().t() if transpose else other_src
    other_dst = torch.empty(other_src.shape, dtype=src.dtype, device="cuda")
    api.copy_(other_dst, other_src)
    launches[f"{prefix}alternating_pair_us"] = lambda: (api.copy_(dst, src), api.copy_(other_dst, other_src))
    # What torch's own calls cost the host, for scale.
    launches[f"torch_copy_{'transpose_' if transpose else ''}call_us"] = lambda: dst.copy_(src)
    launches["torch_clone_call_us"] = lambda: src.clone()
    launches["torch_empty_like_us"] = lambda: torch.empty_like(src)
    launches["torch_empty_strided_us"] = lambda: torch.empty_strided(
        src.size(), src.stride(), dtype=src.dtype, device=src.device
    )
    result = host_costs_us(launches)
    result[f"{prefix}alternating_call_us"] = result.pop(f"{prefix}alternating_pair_us") / 2
    return result


HOST_COST_WHAT = (
    "Host microseconds per call, configuration seen before: back-to-back calls of a tiny copy, median of "
    "7 rounds that interleave every variant; tmakit.copy_ / tmakit.copy and their parts (compiled launch "
    "alone, no PDL, bulk, alternating configurations) beside torch's copy_/clone/empty, for a plain and a "
    "transposing copy; group 'plain': one seed-kernel call with prepared CuTe tensors, from_dlpack each "
    "call, and TVM-FFI."
)


def host_cost_study(context: dict, groups: dict[str, dict[str, float]]) -> dict:
    """The host-cost study in the one schema of benchmarks/results: a row per (group, key, us)."""
    rows = [
        {"group": group, "key": key, "us": us} for group, costs in groups.items() for key, us in costs.items()
    ]
    return {"study": "host-cost", "what": HOST_COST_WHAT, "context": context, "rows": rows, "summary": {}}


def host_cost_report(commit: str | None) -> dict:
    """What `scripts/device_run.sh hostcost` writes: the host cost of copies and transposing
    copies (`measure_copy_host_cost`) and of plain compiled calls, with the device context."""
    groups = {
        "copy": measure_copy_host_cost(),
        "transpose": measure_copy_host_cost(transpose=True),
        "plain": measure_host_overhead(),
    }
    return host_cost_study({**device_context(commit), "step": "hostcost"}, groups)


def measure_host_overhead() -> dict:
    """Host microseconds per call of a compiled tiny load kernel, by the plain path and, when the
    apache-tvm-ffi package is importable, by the DSL's TVM-FFI path (the compiled functions
    called directly in both)."""

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
