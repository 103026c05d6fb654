"""tmakit's own kernels as `tmakit lint --kernel` compiles them: a variant a name, each a small
plan of one kernel and one of its options. The copy ring's variants are the core's (its kernel
and compile are: `runtime.launch.compile_copy`); each family lists its own as `LINT_VARIANTS` in
its `launch` part (`tmakit.registry`), read here without naming the family.

A variant's `build()` is its family's compile function's `build` (`compile_x.__wrapped__`,
`runtime.compile.compiles`): the host function and example arguments `cute.compile` takes, which
`capture` compiles itself with the PTX and the MLIR kept. Each variant is captured once per
process.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from .. import registry
from ..config import LoadConfig
from ..plan import CopyOptions, CopyPlan, LoadPlan, PipelinePlan, copy_class
from ..runtime.launch import compile_copy
from .capture import Captured, capture
from .checks import lint_text
from .report import LintReport

DEFAULT = "load"  # the seed's tile load: what `tmakit lint` checks without --kernel


@dataclass(frozen=True)
class LintVariant:
    """One kernel variant: what it is (`summary`), `build()`: (host function, *example
    arguments), and the dtype its bulk reduce stores combine where its tensors reach them as
    bytes (`reduce_dtype`, for `lint`)."""

    summary: str
    build: Callable[[], tuple]
    reduce_dtype: str | None = None


def _copy_ring() -> CopyPlan:
    """A rank-3 bf16 copy on a persistent 4-stage ring, 128-byte swizzled 64x64 tiles."""
    config = LoadConfig((3, 1000, 776), "bf16", (64, 64), 128)
    return CopyPlan(PipelinePlan(LoadPlan(config), stages=4, persistent=True))


def _transposing() -> CopyPlan:
    config = LoadConfig((1000, 3000), "fp16", (64, 256), 0, "col")
    ring = PipelinePlan(LoadPlan(config), stages=4, consumer_warps=4, persistent=True)
    return CopyPlan(ring, True)


# The copy ring's variants: each family's rings run on it.
CORE_VARIANTS = {
    "copy": LintVariant(
        "the copy ring: bf16 (3, 1000, 776), 64x64 tiles, 4 stages, persistent, TMA stores",
        lambda: compile_copy.__wrapped__(_copy_ring()),
    ),
    "transpose": LintVariant(
        "the layout-changing copy: fp16 column-major (1000, 3000), 64x256 tiles, 4 consumer warps",
        lambda: compile_copy.__wrapped__(_transposing()),
    ),
    "copy-generic": LintVariant(
        "the shape-generic copy class: rank 3, column-major fp16, 16x256 tiles",
        lambda: compile_copy.__wrapped__(
            copy_class(CopyOptions(), "fp16", 3, "col", False, (16, 256), 132, False), shape_generic=True
        ),
    ),
    "copy-bulk": LintVariant(
        "the bulk copy class: rows of 256 fp16 by bulk copies (run-time bytes), shape-generic",
        lambda: compile_copy.__wrapped__(
            copy_class(
                CopyOptions(bulk=True), "fp16", 2, "row", False, (16, 256), 132, False, rows_width=256
            ),
            tensor_shape=(1, 256),
            shape_generic=True,
        ),
    ),
}


@functools.cache
def variants() -> dict[str, LintVariant]:
    """Every variant by name: the copy ring's, then each family's `LINT_VARIANTS`.

    Raises:
        ValueError: two variants share a name.
    """
    found = dict(CORE_VARIANTS)
    for module in registry.parts("launch"):
        for name, variant in getattr(module, "LINT_VARIANTS", {}).items():
            if name in found:
                raise ValueError(f"two lint variants are named {name!r} (one in {module.__name__})")
            found[name] = variant
    return found


@functools.cache
def captured(name: str) -> Captured:
    """Variant `name` compiled with its PTX and MLIR kept, once per process."""
    return capture(*variants()[name].build())


def lint_variant(name: str) -> LintReport:
    """The lint of variant `name` (a key of `variants()`).

    Raises:
        KeyError: no variant is named `name`.
    """
    variant = variants()[name]
    found = captured(name)
    return lint_text(found.ptx, found.mlir, found.tensor_elements, variant.reduce_dtype)
