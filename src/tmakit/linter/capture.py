"""A CuTe DSL function compiled for sm_90a on this machine (no GPU needed) with what the lint
reads kept: its PTX, the DSL's MLIR module (what `CUTE_DSL_KEEP=ir` keeps) and the element types
of the tensors it was given. The DSL is imported only when something is captured.

The PTX has no box sizes and the MLIR no signedness (Int32 and Uint32 are both `i32` there, and
in the traced kernel too): the MLIR's atoms give each copy's bytes, the arguments' DSL types the
tensors' signedness (`mlir.parse_module`).
"""

from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass
from typing import Any

from ..errors import TmaConfigError
from ..runtime.compile import TARGET_ARCH
from ..validate import type_name
from .checks import check_reduce_dtype, lint_text
from .report import LintReport

# One capture at a time: the DSL's settings are process-wide.
_CAPTURING = threading.Lock()


@dataclass(frozen=True)
class Captured:
    """What one compile kept: the `ptx` text, the `mlir` module's text (None where this DSL
    kept none) and the DSL element type of each tensor argument, in order
    (`tensor_elements`: Int32, Uint32, Float16...)."""

    ptx: str
    mlir: str | None
    tensor_elements: tuple[str | None, ...]


def lint(host_function: Any, *args: Any, reduce_dtype: str | None = None) -> LintReport:
    """Compile a CuTe DSL host function (a `@cute.jit` function or callable object) for sm_90a on
    this machine, no GPU needed, and check the TMA data movement of every kernel it launches:
    each expect_tx's bytes against the copies completing on its barrier (each tensor copy's bytes
    read from its TMA atom, a multicast copy's counted in every CTA it reaches), each
    mbarrier.init fenced before use, bulk store groups committed and waited for before exit,
    multicast masks within the cluster, reduce stores' op and type against the tensor's dtype
    and signedness. A value known only at run time leaves its site unchecked; the report counts
    each check's proven, unchecked and wrong sites.

    Args:
        host_function: what `cute.compile` takes: the host function that launches the kernels.
        *args: its example arguments, as for `cute.compile` (fake tensors describe tensors with
            no memory behind them: `tmakit.runtime.compile.fake_tensor`).
        reduce_dtype: the dtype (a tmakit dtype name, "int32", "bf16", ...) the kernels' bulk
            reduce stores combine, where their tensors reach them as bytes; None leaves those
            stores' types unchecked.

    Returns:
        The LintReport: every finding (check, PTX line and instruction, barrier, phase,
        expected and actual), the unchecked sites and why, each check's counts.

    Raises:
        TmaConfigError: `host_function` is not callable, `reduce_dtype` is not a dtype tmakit
            knows, or the compile left no PTX.
        ImportError: nvidia-cutlass-dsl is not installed.
        Exception: what `cute.compile` raises for a function it cannot compile.
    """
    if not callable(host_function):
        raise TmaConfigError(
            f"host_function is {type_name(host_function)}; give the @cute.jit function (or callable "
            "object) that launches the kernels"
        )
    check_reduce_dtype(reduce_dtype)
    captured = capture(host_function, *args)
    return lint_text(captured.ptx, captured.mlir, captured.tensor_elements, reduce_dtype)


def capture(host_function: Any, *args: Any, options: str = "") -> Captured:
    """`host_function` compiled for sm_90a with its PTX and MLIR kept (what `cute.compile`
    raises, it raises). `options`: more of `cute.compile`'s options, where the kernel's owner
    compiles it with some that change its code (`--enable-assertions` keeps bounds checks)."""
    import cutlass.cute as cute
    from cutlass.cutlass_dsl import CuTeDSL

    settings = CuTeDSL._get_dsl().envar
    elements = tuple(
        getattr(getattr(arg, "element_type", None), "__name__", None)
        for arg in args
        if hasattr(arg, "element_type")
    )
    with _CAPTURING, tempfile.TemporaryDirectory(prefix="tmakit-lint-") as folder:
        saved = {name: getattr(settings, name, None) for name in ("keep_ir_clean", "dump_dir")}
        try:
            # What CUTE_DSL_KEEP=ir sets, for this compile alone (the settings are read once, when
            # the DSL starts; the environment variable would need setting before that).
            settings.keep_ir_clean = True
            settings.dump_dir = folder
            kept = f"{options} --gpu-arch {TARGET_ARCH} --keep-ptx --dump-dir {folder}".strip()
            function = cute.compile(host_function, *args, options=kept)
        finally:
            for name, value in saved.items():
                setattr(settings, name, value)
        ptx = _text(function.artifacts.PTX)
        mlir = _text(getattr(function.artifacts, "MLIR", None))
    if not ptx:
        raise TmaConfigError("the compile kept no PTX: nothing to lint")
    return Captured(ptx, mlir or None, elements)


def _text(artifact: str | None) -> str | None:
    """An artifact's text: the DSL gives a path or the text itself, depending on its version."""
    if artifact and len(artifact) < 4096 and os.path.exists(artifact):
        with open(artifact) as f:
            return f.read()
    return artifact
