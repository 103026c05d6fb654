"""The load family's kernels compiled once per configuration (`runtime.compile.compiles`): the
tile load (the seed's kernel) and the pipelined load, with the example arguments each is compiled
against. Compiling needs no GPU; the kernel module (the DSL) is imported where a kernel is built."""

from __future__ import annotations

from ..config import DTYPES, RAW_BYTE, SEED
from ..linter.kernels import LintVariant
from ..plan import LoadPlan, PipelinePlan
from ..plan.ring import GUARD_WORDS
from ..runtime.compile import compiles, fake_source, fake_tensor, placeholder_stream, symbolic_tensors

# What the core reads by name (`registry.exporting`): the demo's and the profiler's tile load.
__all__ = ["compile_tile_load"]


@compiles
def compile_tile_load(
    plan: LoadPlan,
    consumer: str = "store",
    tile_shift: tuple[int, int] = (0, 0),
    tvm_ffi: bool = False,
    shape_generic: bool = False,
) -> tuple:
    """The tile-load kernel (`kernel.TileLoadKernel`) for sm_90a. `consumer="none"` is the seed's
    load-only kernel; `tile_shift` is for verifier tests only; `tvm_ffi` as in `compile_kernel`.
    `shape_generic` (with TVM-FFI): one compile for every shape of the plan's dtype, rank, layout,
    tile and swizzle (`plan.stand_in_config`); the scratch is then the compact padded output of
    whatever shape is loaded."""
    if not shape_generic:
        plan.check_specialised()
    from .kernel import TileLoadKernel

    config = plan.config
    rank = len(config.shape)
    if shape_generic:
        src = symbolic_tensors(config.element, (config.contiguous_index,), rank)[0]
        scratch = {
            "none": src,
            "store": symbolic_tensors(config.element, (rank - 1,), rank, aligned_strides=False)[0],
        }[consumer]
    else:
        src = fake_source(config)
        scratch = {
            "none": src,
            "store": fake_tensor(config.element, plan.padded_shape),
            "raw": fake_tensor(RAW_BYTE, (plan.total_tile_loads, plan.expected_tx_bytes)),
        }[consumer]
    kernel = TileLoadKernel(plan, consumer=consumer, tile_shift=tile_shift, shape_generic=shape_generic)
    return kernel, src, scratch, placeholder_stream(env=tvm_ffi)


@compiles
def compile_pipelined_load(
    pipeline: PipelinePlan,
    consumer: str = "store",
    hang_guard: bool = False,
    tvm_ffi: bool = False,
) -> tuple:
    """A pipelined load (`kernel.PipelinedLoadKernel`: the consumers "none", "store" and
    "rowsum") for sm_90a, no GPU needed. `hang_guard` is the debug hang guard; `tvm_ffi` as in
    `compile_kernel`."""
    pipeline.load.check_specialised()
    from .kernel import PipelinedLoadKernel

    kernel = PipelinedLoadKernel(pipeline, consumer, hang_guard=hang_guard)
    return kernel, *pipelined_load_arguments(pipeline, consumer, tvm_ffi)


def pipelined_load_arguments(pipeline: PipelinePlan, consumer: str, tvm_ffi: bool) -> tuple:
    """The example arguments a pipelined load is compiled against, (src, out, guard, stream); the
    parameters as `compile_pipelined_load` takes them."""
    import cutlass

    plan = pipeline.load
    src = fake_source(plan.config)
    out = {
        "none": src,
        "store": fake_tensor(plan.config.element, plan.padded_shape),
        "rowsum": fake_tensor(DTYPES["fp32"], pipeline.rowsum_shape),
    }[consumer]
    guard = fake_tensor(cutlass.Int32, (GUARD_WORDS,))
    return src, out, guard, placeholder_stream(env=tvm_ffi)


# The variants `tmakit lint --kernel` compiles (`tmakit.linter.kernels`): a small plan of each kernel.
LINT_VARIANTS = {
    "load": LintVariant(
        "the seed's tile load: fp16 8448x1792, 64x256 tiles, one stage, stored back",
        lambda: compile_tile_load.__wrapped__(LoadPlan(SEED)),
    ),
    "load-ring": LintVariant(
        "the seed's load on a 4-stage ring, two consumer warps storing each stage",
        lambda: compile_pipelined_load.__wrapped__(PipelinePlan(LoadPlan(SEED), stages=4, consumer_warps=2)),
    ),
    "load-rowsum-guard": LintVariant(
        "the seed's load on a 2-stage ring summing rows, with the hang guard's bounded waits",
        lambda: compile_pipelined_load.__wrapped__(
            PipelinePlan(LoadPlan(SEED), stages=2), "rowsum", hang_guard=True
        ),
    ),
}
