"""Build compiled kernels for sm_90a, with or without a GPU, and keep their PTX.

`CUTE_DSL_ARCH` detection calls the driver and silently falls back to sm_100a when there is none,
so tmakit always names its target: Hopper's sm_90a.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any

TARGET_ARCH = "sm_90a"
TESTED_DSL_VERSION = "4.8.1"


def installed_dsl_version() -> str | None:
    """The installed nvidia-cutlass-dsl version, or None when it is not installed."""
    from importlib import metadata

    try:
        return metadata.version("nvidia-cutlass-dsl")
    except metadata.PackageNotFoundError:
        pass
    try:  # running from an unpacked DSL on PYTHONPATH (the GPU machine) has no dist-info
        import cutlass

        return getattr(cutlass, "__version__", None)
    except ImportError:
        return None


def dsl_version_warning() -> str | None:
    """A warning when the installed DSL differs from the version tmakit is tested with."""
    version = installed_dsl_version()
    if version is None:
        return "nvidia-cutlass-dsl is not installed: `pip install nvidia-cutlass-dsl==4.8.1`"
    if version != TESTED_DSL_VERSION:
        return (
            f"WARNING: nvidia-cutlass-dsl {version} is installed; tmakit is tested with "
            f"{TESTED_DSL_VERSION}. The TMA API moved between versions."
        )
    return None


@dataclass
class CompiledKernel:
    """A compiled CuTe DSL function plus what the experiments report about it."""

    function: Any
    compile_seconds: float
    ptx: str | None

    def __call__(self, *args: Any) -> Any:
        return self.function(*args)


def compile_kernel(
    kernel: Any, *example_args: Any, keep_ptx: bool = False, tvm_ffi: bool = False
) -> CompiledKernel:
    """`cute.compile` the host function `kernel` for sm_90a; nothing touches the driver here.
    `tvm_ffi=True` compiles for the DSL's TVM-FFI calling path (torch tensors passed directly;
    needs the apache-tvm-ffi package).

    `example_args` are CuTe tensors (e.g. `to_cute_tensor` of numpy arrays on a CPU-only machine)."""
    import cutlass.cute as cute

    options = f"--gpu-arch {TARGET_ARCH}" + (" --enable-tvm-ffi" if tvm_ffi else "")
    with tempfile.TemporaryDirectory(prefix="tmakit-ptx-") as dump_dir:
        if keep_ptx:
            options += f" --keep-ptx --dump-dir {dump_dir}"
        start = time.perf_counter()
        function = cute.compile(kernel, *example_args, options=options)
        seconds = time.perf_counter() - start
        ptx = function.artifacts.PTX if keep_ptx else None
    if ptx is not None and os.path.exists(ptx):  # some versions return the path, not the text
        with open(ptx) as f:
            ptx = f.read()
    return CompiledKernel(function, seconds, ptx)


def to_cute_tensor(array: Any) -> Any:
    """A CuTe tensor over any DLPack array (numpy or torch), promising TMA's 16-byte alignment.

    Callers check the base address first (`validate.check_base_address`): the promise is not
    verified by the DSL."""
    from cutlass.cute.runtime import from_dlpack

    return from_dlpack(array, assumed_align=16)


def fake_tensor(element: Any, shape: tuple[int, ...], strides: tuple[int, ...] | None = None) -> Any:
    """A tensor of a tmakit `DType` (or a cutlass numeric type) as a description with no memory
    behind it (compact row-major unless `strides` are given, in elements): enough to compile, on a
    CPU too, a kernel that is later called with real tensors of that dtype, shape and strides."""
    import cutlass
    from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_tensor

    dtype = getattr(cutlass, element.cutlass_name) if hasattr(element, "cutlass_name") else element
    if strides is not None:
        return make_fake_tensor(dtype, shape, strides, assumed_align=16)
    innermost_first = tuple(reversed(range(len(shape))))
    return make_fake_compact_tensor(dtype, shape, stride_order=innermost_first, assumed_align=16)


def fake_source(config: Any) -> Any:
    """The description of a tensor a `LoadConfig` describes: its dtype, shape and strides."""
    return fake_tensor(config.element, config.shape, config.element_strides)


def placeholder_stream() -> Any:
    """A CUstream value to compile against; the real stream is passed at each call."""
    import cuda.bindings.driver as cuda

    return cuda.CUstream(0)
