"""Build compiled kernels for sm_90a, with or without a GPU, and keep their PTX; the one compile
cache (in memory for the process, on disk for TVM-FFI functions across processes).

`CUTE_DSL_ARCH` detection calls the driver and silently falls back to sm_100a when there is none,
so tmakit always names its target: Hopper's sm_90a.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import LoadConfig
from ..limits import GLOBAL_BASE_ALIGN, GLOBAL_STRIDE_ALIGN

if TYPE_CHECKING:
    import numpy as np
    import torch

TARGET_ARCH = "sm_90a"
# The DSL versions CI runs the suite with: the ends of pyproject.toml's range (test_packaging holds
# the three together); the GPU checks ran on the last.
TESTED_DSL_VERSIONS = ("4.8.0", "4.8.1")


@functools.cache
def installed_dsl_version() -> str | None:
    """The nvidia-cutlass-dsl version, or None when it is not installed: the imported package's
    own once it is imported (the version that runs; reading the installed distributions' metadata
    scans every path entry, about 0.1 s the first time), else the installed distribution's."""
    imported = sys.modules.get("cutlass")
    if getattr(imported, "__version__", None):
        return imported.__version__
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
        newest = TESTED_DSL_VERSIONS[-1]
        return f"nvidia-cutlass-dsl is not installed: `pip install nvidia-cutlass-dsl=={newest}`"
    if version not in TESTED_DSL_VERSIONS:
        return (
            f"WARNING: nvidia-cutlass-dsl {version} is installed; tmakit is tested with "
            f"{' and '.join(TESTED_DSL_VERSIONS)}. The TMA API moved between versions."
        )
    return None


@dataclass
class CompiledKernel:
    """A compiled CuTe DSL function plus what the experiments report about it."""

    function: Any
    compile_seconds: float
    ptx: str | None
    from_disk: bool = False  # loaded from the on-disk cache (`compile_seconds` is then the load)

    def __call__(self, *args: Any) -> Any:
        return self.function(*args)


# (cache key, keep_ptx, tvm_ffi) -> compiled kernel, for the life of the process.
_COMPILED: dict[tuple, CompiledKernel] = {}
_COMPILING = threading.Lock()


def compiled_once(
    cache_key: tuple, build: Callable[[], tuple], keep_ptx: bool = False, tvm_ffi: bool = False
) -> CompiledKernel:
    """The kernel `cache_key` names (a hashable tuple of everything it is built from), compiled
    once per process: loaded from the disk cache when it holds the key (TVM-FFI only), else
    `build()` returns (host function, *example arguments), which `compile_kernel` compiles. A
    disk hit builds nothing: no kernel module is imported, no tensor described."""
    key = (cache_key, keep_ptx, tvm_ffi)
    compiled = _COMPILED.get(key)
    if compiled is None:
        with _COMPILING:  # threads meeting a new kernel at once compile it once
            compiled = _COMPILED.get(key)
            if compiled is None:
                text_key = repr(cache_key)
                compiled = load_from_disk(text_key) if tvm_ffi and not keep_ptx else None
                if compiled is None:
                    kernel, *example_args = build()
                    compiled = compile_kernel(
                        kernel, *example_args, keep_ptx=keep_ptx, tvm_ffi=tvm_ffi, cache_key=text_key
                    )
                _COMPILED[key] = compiled
    return compiled


def compiles(build: Callable[..., tuple]) -> Callable[..., CompiledKernel]:
    """A kernel family's compile, cached under a key derived from the call: `build(...)` returns
    (host function, *example arguments), and its arguments, bound to its signature with the
    defaults applied, are everything the kernel is built from. So the key is `build`'s name and
    those arguments: no argument can be left out of it. How to compile is not in the key but goes
    to `compiled_once` as the compile's mode: `keep_ptx`, a keyword of every compile that no
    `build` reads, and `tvm_ffi` where `build` takes it (its example stream depends on it). `build`
    runs only on a miss, after the disk cache (TVM-FFI) is asked, so its checks of the plan run
    once per key too. The compile's `__wrapped__` is `build` itself: what `tmakit lint` compiles
    with the PTX and the MLIR kept (`linter.kernels`)."""
    signature = inspect.signature(build)

    @functools.wraps(build)
    def compile_family(*args: Any, keep_ptx: bool = False, **kwargs: Any) -> CompiledKernel:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = bound.arguments
        key = (build.__name__, *((name, value) for name, value in arguments.items() if name != "tvm_ffi"))
        tvm_ffi = bool(arguments.get("tvm_ffi", False))
        return compiled_once(key, lambda: build(*bound.args, **bound.kwargs), bool(keep_ptx), tvm_ffi)

    return compile_family


def compile_kernel(
    kernel: Any,
    *example_args: Any,
    keep_ptx: bool = False,
    tvm_ffi: bool = False,
    cache_key: str | None = None,
) -> CompiledKernel:
    """`cute.compile` the host function `kernel` for sm_90a; nothing touches the driver here.
    `tvm_ffi=True` compiles for the DSL's TVM-FFI calling path (torch tensors passed directly, the
    stream taken from torch's current stream when compiled against `placeholder_stream(env=True)`;
    needs the apache-tvm-ffi package).

    With `tvm_ffi` and a `cache_key` (a text that names the kernel and its configuration), the
    compiled function is also kept on disk (`cache_dir()`) and later loaded instead of compiled.

    `example_args` are CuTe tensors (e.g. `to_cute_tensor` of numpy arrays on a CPU-only machine)."""
    import cutlass.cute as cute

    use_disk = tvm_ffi and cache_key and not keep_ptx
    if use_disk:
        loaded = load_from_disk(cache_key)
        if loaded is not None:
            return loaded

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
    entry = disk_cache_entry(cache_key) if use_disk else None
    if entry is not None:
        store_cached(function, *entry)
    return CompiledKernel(function, seconds, ptx)


# -- the on-disk cache of TVM-FFI compiled functions --------------------------------------------
def cache_dir() -> Path | None:
    """Where compiled kernels are kept: $TMAKIT_CACHE_DIR, else ~/.cache/tmakit; "off" (or an
    empty value) keeps nothing on disk."""
    configured = os.environ.get("TMAKIT_CACHE_DIR")
    if configured is not None:
        return None if configured in ("", "off") else Path(configured)
    return Path.home() / ".cache" / "tmakit"


@functools.cache
def _source_fingerprint() -> str:
    """A hash of tmakit's own source: any change to a kernel (or anything else) misses the cache."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.parent.rglob("*.py")):  # the whole tmakit package
        digest.update(path.read_bytes())
    return digest.hexdigest()


def disk_cache_entry(cache_key: str) -> tuple[Path, str] | None:
    """(object file, exported function name) for `cache_key` with this tmakit source, DSL
    version and target; None when the cache is off."""
    directory = cache_dir()
    if directory is None:
        return None
    text = "\n".join((cache_key, _source_fingerprint(), str(installed_dsl_version()), TARGET_ARCH))
    digest = hashlib.sha256(text.encode()).hexdigest()[:32]
    return directory / f"{digest}.o", f"tmakit_{digest}"


def load_from_disk(cache_key: str) -> CompiledKernel | None:
    """The TVM-FFI function the disk cache holds for `cache_key` (`compile_seconds`: the load),
    or None: the cache is off, has no such entry, or its files cannot be loaded."""
    import cutlass  # noqa: F401 - loading needs the DSL; imported first, it names its version cheaply

    entry = disk_cache_entry(cache_key)
    if entry is None or not entry[0].exists():
        return None
    start = time.perf_counter()
    function = load_cached(*entry)
    if function is None:
        return None
    return CompiledKernel(function, time.perf_counter() - start, None, from_disk=True)


def load_cached(path: Path, name: str) -> Any:
    """The TVM-FFI function exported to `path` - from its shared library when there is one
    (`link_shared`), else from the object file - or None if it cannot be loaded (then
    recompiled)."""
    from cutlass.runtime import load_module

    shared = path.with_suffix(".so")
    for candidate in (shared, path) if shared.exists() else (path,):
        try:
            return getattr(load_module(str(candidate), enable_tvm_ffi=True), name)
        except Exception:  # noqa: BLE001 - a damaged or foreign file is a cache miss, not an error
            if candidate == shared:
                shared.unlink(missing_ok=True)  # the object file is tried next
    return None


def store_cached(function: Any, path: Path, name: str) -> None:
    """Export a TVM-FFI compiled function to `path` (written aside, then renamed: concurrent
    processes never read half a file), and link it into a shared library beside it. A
    read-only or full disk only costs the cache."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp.o")
        function.export_to_c(str(partial), function_name=name)
        os.replace(partial, path)
    except OSError:
        return
    link_shared(path)


def link_shared(path: Path) -> Path | None:
    """Link an exported object file into a shared library (`path` with the suffix .so) with the
    system's C compiler, against the DSL's runtime libraries: loading it is a dlopen, milliseconds,
    where the DSL links an object file itself at each load (about 0.1 s on the H200 machine).
    None, and nothing written, where there is no compiler or linking fails."""
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        return None
    from cutlass.runtime import find_runtime_libraries

    libraries = [library for library in find_runtime_libraries(enable_tvm_ffi=True) if Path(library).exists()]
    target = path.with_suffix(".so")
    partial = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp.so")
    rpaths = [f"-Wl,-rpath,{Path(library).parent}" for library in libraries]
    command = [compiler, "-shared", "-o", str(partial), str(path), *libraries, *rpaths]
    try:
        subprocess.run(command, check=True, capture_output=True, timeout=120)
        os.replace(partial, target)
    except (OSError, subprocess.SubprocessError):
        partial.unlink(missing_ok=True)
        return None
    return target


def to_cute_tensor(array: torch.Tensor | np.ndarray) -> Any:
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


def symbolic_tensors(
    element: Any, contiguous_dims: tuple[int, ...], rank: int, aligned_strides: bool = True
) -> list[Any]:
    """Tensors of one dtype, rank and shape whose extents and strides are run-time values (one
    per `contiguous_dims` entry: the dim with stride 1 of each): a kernel compiled against them
    serves every shape of that rank. They share their extents (every tensor has the same shape);
    each has its own strides, promised to be multiples of 16 bytes (TMA's rule, checked by
    `validate` before every call; `aligned_strides=False` promises nothing: a scratch output
    that no TMA map addresses). Extents and strides are 64-bit: a tensor may hold more than
    2^31 elements."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_tensor

    dtype = getattr(cutlass, element.cutlass_name) if hasattr(element, "cutlass_name") else element
    extents = tuple(cute.sym_int64(symbol=f"extent{dim}") for dim in range(rank))
    divisibility = max(1, GLOBAL_STRIDE_ALIGN * 8 // dtype.width) if aligned_strides else 1
    tensors = []
    for contiguous in contiguous_dims:
        strides = tuple(
            1 if dim == contiguous else cute.sym_int64(divisibility=divisibility, symbol=f"stride{dim}")
            for dim in range(rank)
        )
        tensors.append(make_fake_tensor(dtype, extents, strides, assumed_align=GLOBAL_BASE_ALIGN))
    return tensors


def fake_source(config: LoadConfig) -> Any:
    """The description of a tensor a `LoadConfig` describes: its dtype, shape and strides."""
    return fake_tensor(config.element, config.shape, config.element_strides)


def placeholder_stream(env: bool = False) -> Any:
    """A CUstream value to compile against; the real stream is passed at each call. `env=True`
    (TVM-FFI only): the compiled function takes no stream argument and launches on the caller's
    current torch stream (no stream query in Python: less host time per call)."""
    if env:
        from cutlass.runtime import make_fake_stream

        return make_fake_stream(use_tvm_ffi_env_stream=True)
    import cuda.bindings.driver as cuda

    return cuda.CUstream(0)
