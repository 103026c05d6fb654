"""Running pipelined loads: compile, verify (store-back or row sums) and time on the GPU.

The experiment layer over `kernels.pipeline`, as `loads` is over `kernels.tile_load`."""

from __future__ import annotations

import functools
from typing import Any

from . import verify
from .compile import CompiledKernel, compile_kernel, fake_source, fake_tensor, placeholder_stream
from .config import DTYPES, LoadConfig
from .errors import TmaHangError
from .loads import compare_with_input
from .plan import PipelinePlan
from .sweep import padded_strides


@functools.lru_cache(maxsize=256)
def compile_pipelined_load(
    pipeline: PipelinePlan,
    consumer: str = "store",
    hang_guard: bool = False,
    expect_extra_bytes: int = 0,
    freeze_parity: bool = False,
    keep_ptx: bool = False,
    tvm_ffi: bool = False,
    destination: LoadConfig | None = None,
    tensor_shape: tuple[int, ...] | None = None,
) -> CompiledKernel:
    """Compile the pipelined kernel for sm_90a (no GPU needed). `hang_guard` is the debug hang
    guard, `expect_extra_bytes` and `freeze_parity` test-only mistakes; `tvm_ffi` as in
    `compile_kernel` (the compiled function then takes no stream: it launches on torch's current
    stream, and is kept in the on-disk cache); `destination`: the "copy" consumer's destination
    (default: the source's shape and strides, or with `pipeline.transpose` the compact
    other-major layout); `tensor_shape`: the compiled function is called with compact tensors of
    this shape, whose memory the kernel views as the plan's compact matrix (a "copy" of the
    tensor's memory as rows)."""
    import cutlass

    from .kernels.pipeline import GUARD_WORDS, PipelinedLoadKernel

    plan = pipeline.load
    src = fake_source(plan.config) if tensor_shape is None else fake_tensor(plan.config.element, tensor_shape)
    out = {
        "none": src,
        "store": fake_tensor(plan.config.element, plan.padded_shape),
        "rowsum": fake_tensor(DTYPES["fp32"], pipeline.rowsum_shape),
        "copy": src if tensor_shape else fake_source(destination or copy_destination(pipeline)),
    }[consumer]
    kernel = PipelinedLoadKernel(
        pipeline, consumer, hang_guard, expect_extra_bytes, freeze_parity, as_rows=tensor_shape is not None
    )
    guard = fake_tensor(cutlass.Int32, (GUARD_WORDS,))
    # Kept on disk too when called through TVM-FFI (the copy launcher): the key names everything
    # the kernel is built from; the source itself is fingerprinted by `compile_kernel`.
    knobs = (hang_guard, expect_extra_bytes, freeze_parity, destination, tensor_shape)
    key = repr(("PipelinedLoadKernel", pipeline, consumer, *knobs))
    return compile_kernel(
        kernel,
        src,
        out,
        guard,
        placeholder_stream(env=tvm_ffi),
        keep_ptx=keep_ptx,
        tvm_ffi=tvm_ffi,
        cache_key=key,
    )


def copy_destination(pipeline: PipelinePlan) -> LoadConfig:
    """The default destination of a copy: the source's layout, or with `pipeline.transpose` the
    same shape stored with the other contiguous mode (pitch padded to 16 bytes)."""
    config = pipeline.load.config
    if not pipeline.transpose:
        return config
    major = "row" if pipeline.load.rows_contiguous else "col"
    strides = padded_strides(config.shape, config.element.nbytes, major)
    return LoadConfig(config.shape, config.dtype, config.tile, 0, major, strides)


def new_guard(device: Any = "cuda") -> Any:
    import torch

    from .kernels.pipeline import GUARD_WORDS

    return torch.zeros(GUARD_WORDS, dtype=torch.int32, device=device)


def raise_if_timed_out(guard: Any) -> None:
    """After the kernel: raise TmaHangError naming the wait the hang guard gave up on - the
    consumers' if they timed out (a full barrier that never completes is the root cause; the
    producer then waits for a stage nobody frees), else the producer's."""
    from .kernels.ring import GUARD_RECORD

    words = [int(v) for v in guard.cpu()]
    records = {"producer waiting for a free stage": words[:GUARD_RECORD],
               "consumer waiting for a full stage": words[GUARD_RECORD:]}  # fmt: skip
    timed_out = [(who, record) for who, record in records.items() if record[0]]
    if timed_out:
        who, (_, block, stage, parity, expected, step, _, _) = timed_out[-1]  # word 0 counts timeouts
        also = " (the producer timed out too)" if len(timed_out) == 2 else ""
        raise TmaHangError(
            f"barrier wait timed out in block {block}, stage {stage}, parity {parity}, step {step} "
            f"({who}){also}; the producer declares {expected} bytes per tile"
        )


def run_pipelined_load(pipeline: PipelinePlan, consumer: str, src: Any, **knobs: Any) -> Any:
    """Launch once on `src` and return the consumer's output (raises TmaHangError if guarded)."""
    import torch

    from . import gpu
    from .compile import to_cute_tensor

    plan = pipeline.load
    compiled = compile_pipelined_load(pipeline, consumer, **knobs)
    if consumer == "rowsum":
        out = torch.zeros(pipeline.rowsum_shape, dtype=torch.float32, device="cuda")  # added into
    elif consumer == "copy":
        bits = gpu.signed_view_dtype(plan.config.element)
        strides = copy_destination(pipeline).element_strides
        out = torch.empty_strided(plan.config.shape, strides, dtype=bits, device="cuda")
        out.fill_(-1)  # poison, every element the destination has
        out = out.view(src.dtype)
    else:
        bits = gpu.signed_view_dtype(plan.config.element)
        out = torch.full(plan.padded_shape, -1, dtype=bits, device="cuda").view(src.dtype)  # poison
    guard = new_guard()
    compiled(to_cute_tensor(src), to_cute_tensor(out), to_cute_tensor(guard), gpu.current_stream())
    torch.cuda.synchronize()
    if knobs.get("hang_guard"):
        raise_if_timed_out(guard)
    return out


def verify_pipelined_load(
    pipeline: PipelinePlan, consumer: str = "store", **knobs: Any
) -> verify.Verdict | str:
    """Store-back: every element compared (a `Verdict`). Row sums: every row against torch's
    row sum of the same tensor in fp64 (a one-line verdict string, "ok ..." or not)."""
    import torch

    from . import gpu

    plan = pipeline.load
    src = gpu.make_input_tensor(plan)
    out = run_pipelined_load(pipeline, consumer, src, **knobs)
    if consumer == "store":
        return compare_with_input(plan, src, out)
    if consumer == "copy":  # the destination padded like a store-back scratch, then the same check
        bits = gpu.signed_view_dtype(plan.config.element)
        padded = torch.zeros(plan.padded_shape, dtype=bits, device="cuda")
        rows, cols = plan.matrix_shape
        padded[..., :rows, :cols] = out.view(bits)
        return compare_with_input(plan, src, padded)
    rows = plan.matrix_shape[0]
    found = out[..., :rows].double()
    reference = src.double().sum(-1)
    scale = src.double().abs().sum(-1).clamp_min(1.0)
    relative = (found - reference).abs() / scale
    error = relative.max().item()
    if error < 1e-5:
        return f"ok: {found.numel()} row sums within {error:.1e} of torch (relative to sum |x|)"
    first = [int(i) for i in torch.nonzero(relative >= 1e-5)[0]]
    return (
        f"WRONG: row sums off by up to {error:.1e} (relative to sum |x|); first wrong row {first}, "
        f"row block {first[-1] // plan.config.tile[0]}: {found[tuple(first)].item()} vs "
        f"{reference[tuple(first)].item()}"
    )
