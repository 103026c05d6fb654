"""The small public face on real tensors: describe, check, allocate, load.

Every check here runs before anything compiles or launches; a tensor TMA cannot serve raises
`TmaConfigError` naming the value and the rule.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from .config import DTYPES, LoadConfig
from .errors import TmaConfigError
from .plan import LoadPlan
from .sweep import padded_strides
from .validate import check_base_address, check_rank

# Names torch and numpy give the dtypes tmakit knows.
_DTYPE_BY_NAME = {element.torch_name: name for name, element in DTYPES.items()}


def tmakit_dtype(dtype: Any) -> str:
    """tmakit's name for a torch or numpy dtype; TmaConfigError for one TMA loads cannot take."""
    name = str(dtype).removeprefix("torch.")
    if name in DTYPES:
        return name
    if name not in _DTYPE_BY_NAME:
        raise TmaConfigError(f"dtype {name} is not supported; tmakit loads {', '.join(_DTYPE_BY_NAME)}")
    return _DTYPE_BY_NAME[name]


def config_for(
    tensor: Any, tile: tuple[int, int] = (64, 256), swizzle: int = 0, *, on_gpu: bool = True
) -> LoadConfig:
    """The load configuration of a torch tensor (or numpy array): shape, dtype and strides read
    from the tensor itself - a transposed view stays column-major, never reinterpreted.

    Raises TmaConfigError for a tensor TMA cannot serve: unsupported dtype, rank outside 2..5,
    no stride-1 dim, strides not multiples of 16 bytes, a base address not 16-byte aligned, or a
    tensor that is not on a CUDA device when `on_gpu`."""
    shape, dtype, strides = checked_tensor(tensor, on_gpu)
    major = _major(strides)
    config = LoadConfig(shape, dtype, tuple(tile), swizzle, major, strides)
    LoadPlan(config)  # validates the strides and the tile
    return config


def checked_tensor(
    tensor: Any, on_gpu: bool = True, any_rank: bool = False
) -> tuple[tuple[int, ...], str, tuple[int, ...]]:
    """(shape, tmakit dtype, element strides) of a torch tensor or numpy array, after the checks
    that need no tile: rank (unless `any_rank`: a compact copy's rows view reads memory, not
    dims), dtype, device (when `on_gpu`) and 16-byte base address."""
    shape = tuple(int(e) for e in tensor.shape)
    if not any_rank:
        check_rank(len(shape))
    dtype = tmakit_dtype(tensor.dtype)
    if hasattr(tensor, "data_ptr"):  # torch
        strides = tuple(int(s) for s in tensor.stride())
        address = tensor.data_ptr()
        device = tensor.device.type
    else:  # numpy: strides in bytes, always host memory
        strides = tuple(int(s) // tensor.itemsize for s in tensor.strides)
        address = tensor.__array_interface__["data"][0]
        device = "cpu"
    if on_gpu and device != "cuda":
        raise TmaConfigError(f"tensor is on {device}; TMA loads from GPU memory, move it with .cuda() first")
    check_base_address(address)
    return shape, dtype, strides


def _major(strides: tuple[int, ...]) -> str:
    """ "col" when the rows are the contiguous dim (e.g. a transposed view), else "row"."""
    return "col" if strides[-1] != 1 and strides[-2] == 1 else "row"


def padded_empty(shape: tuple[int, ...], dtype: Any, major: str = "row", device: str = "cuda") -> Any:
    """An uninitialised torch tensor of `shape` whose contiguous dim is padded to a multiple of
    16 bytes, so TMA can load it: e.g. a 1000 x 777 bf16 matrix gets 784-element rows. This is how
    odd and prime extents are reached; the view has exactly the wanted shape."""
    import torch

    element = DTYPES[tmakit_dtype(dtype)]
    torch_dtype = dtype if isinstance(dtype, torch.dtype) else getattr(torch, element.torch_name)
    strides = padded_strides(tuple(shape), element.nbytes, major)
    return torch.empty_strided(tuple(shape), strides, dtype=torch_dtype, device=device)


def load_tiles(tensor: Any, tile: tuple[int, int] = (64, 256), swizzle: int = 0) -> Any:
    """Load `tensor` tile by tile with TMA and return what arrived in shared memory, tile by tile,
    as a row-major tensor of the padded shape (past the tensor's edge: TMA's zeros)."""
    import torch

    from . import gpu
    from .compile import to_cute_tensor
    from .loads import compile_tile_load

    plan = LoadPlan(config_for(tensor, tile, swizzle))
    compiled = compile_tile_load(plan, consumer="store")
    out = torch.empty(plan.padded_shape, dtype=tensor.dtype, device=tensor.device)
    compiled(to_cute_tensor(tensor), to_cute_tensor(out), gpu.current_stream())
    return out


def copy_tile(dtype_name: str, transpose: bool = False) -> tuple[int, int]:
    """The copy's default tile for a strided tensor: 16 rows of 512 bytes (256 elements at most,
    TMA's box limit; 8 KiB beat 32 KiB tiles from 1 MiB to 2 GiB on the H200 but for 16 MiB);
    for a layout-changing copy 32 KiB with both extents 128-byte multiples (128 x 128 for 2-byte
    types, the fastest of those timed on the H200)."""
    nbytes = DTYPES[dtype_name].nbytes
    if transpose:
        rows = 128 if nbytes <= 2 else 64
        return rows, min(MAX_TILE_COLUMNS, 32768 // (rows * nbytes))
    return 16, min(MAX_TILE_COLUMNS, 512 // nbytes)


MAX_TILE_COLUMNS = 256  # TMA's box limit, in elements
ROW_VIEW_WIDTHS = (256, 128, 64, 32, 16)  # a compact copy's rows, widest first


def rows_view(numel: int, nbytes: int) -> tuple[int, int] | None:
    """(rows, width): a compact tensor's memory as rows of the widest `ROW_VIEW_WIDTHS` that
    divides its elements and is a whole number of 16-byte chunks; None if none does."""
    for width in ROW_VIEW_WIDTHS:
        if numel % width == 0 and width * nbytes % 16 == 0 and numel >= width:
            return numel // width, width
    return None


def rows_view_tile(rows: int, width: int, nbytes: int, sm_count: int) -> tuple[int, int]:
    """The tile of a compact copy's rows view: 32 KiB while that leaves >= 4 tiles per SM, then
    halved (to 4 KiB) so that small copies still reach every SM. Each tile is one contiguous run
    of memory."""
    tile_rows = max(1, 32768 // (width * nbytes))
    while tile_rows * width * nbytes > 4096 and -(-rows // tile_rows) < 4 * sm_count:
        tile_rows //= 2
    return min(tile_rows, MAX_BOX_ROWS, rows), width


MAX_BOX_ROWS = 256


def copy_stages(tile_bytes: int) -> int:
    """Default ring depth: about 64 KiB of loads in flight per block, at least 4 stages (8 stages
    of 8 KiB beat 16 on the H200)."""
    return max(4, 65536 // tile_bytes)


def copy_(
    dst: Any,
    src: Any,
    tile: tuple[int, int] | None = None,
    stages: int | None = None,
    *,
    store_depth: int | None = None,
    blocks_per_sm: int = 1,
    as_rows: bool = False,
    evict_first: bool | None = None,
    pdl: bool = True,
    load_hint: str | None = None,
    store_hint: str | None = None,
    tile_order: str = "interleaved",
    bulk: bool = False,
) -> Any:
    """Copy `src` into `dst` through TMA: pipelined loads into shared memory, TMA stores out.
    `dst` has `src`'s shape and dtype and any layout TMA can address: the same strides, other
    strides with the same contiguous dim, or the other contiguous dim (a column-major source
    into a row-major destination or back: each tile is transposed in shared memory).

    With `as_rows=True`, when both tensors are compact (torch-contiguous) the copy runs over their
    memory viewed as rows (`rows_view`: 256 elements wide where the size allows), so that every
    tile is one contiguous run whatever the tensor's shape (a (N, 3) tensor, a 1-D one); `tile`
    then is a tile of that view. Verified on the H200, but 2-6% slower than 2-D tiles on wide
    matrices there (4c44ab7), hence opt-in.

    Tuning (`tmakit bench --kernel copy --copy-options` measures them): `tile`, `stages` of the
    ring (default `copy_stages`), `store_depth` TMA stores in flight per block (default half the
    stages, at least 2), `blocks_per_sm` of the persistent grid, `evict_first` (loads and stores
    hint L2 to evict their lines first; default: when source and destination together fit in
    L2, where it was faster on the H200, and not beyond, where it was not), `pdl` (programmatic
    dependent launch, default on: the copy may start while the previous kernel on the stream
    ends, and waits for it to complete before it reads or writes memory; back-to-back copies of
    1 MiB took 1.87 instead of 2.42 us on the H200), `load_hint`/`store_hint` (one side's L2
    hint, a `plan.L2_HINTS` name, overriding `evict_first` there), `tile_order` ("interleaved":
    the grid sweeps the tensor together; "columns": the same, counting tiles down each column of
    tiles first; "blocked": each block copies one contiguous run of tiles), `bulk=True` (compact
    tensors of one layout only: the rows view copied with non-tensor bulk copies,
    `cp.async.bulk`, by address and byte count, no tensor maps); none of these last four beat
    the defaults on the H200 (6f917b4, 9c54563, 7896bd2: columns order 3-4% slower, bulk 4-6%
    slower from 256 MiB).

    Compiled once per configuration (kept in memory and, through TVM-FFI, on disk: see
    `compile.cache_dir`); a configuration seen before costs a dictionary lookup and an alignment
    check before the launch, and one repeated call after call not even that (its compiled
    function checks the tensors itself). Raises TmaConfigError before anything launches."""
    knobs = (tile, stages, store_depth, blocks_per_sm, as_rows, evict_first, pdl, load_hint, store_hint,
             tile_order, bulk)  # fmt: skip
    # A configuration repeated call after call skips the key (reading shapes and strides off two
    # torch tensors costs about half as much host time as the launch): its launcher is tried
    # first. The compiled TVM-FFI function checks every argument against what it was compiled
    # for (dtype, shape, strides, 16-byte alignment, one device for both tensors and its own
    # guard words) and raises before launching when one differs; then the full lookup below.
    # (A launch error whose message the DSL cannot parse also surfaces as ValueError: the copy
    # is then launched again, which writes the same bytes.)
    launcher = _tried_first.get(knobs)
    if launcher is not None:
        try:
            launcher(src, dst)
            return dst
        except (TypeError, ValueError):
            _tried_first.pop(knobs, None)
            _streaks[knobs].rejected()
    # get_device(): the device's index (-1 on the CPU), cheaper than building a torch.device
    key = (src.shape, src.stride(), dst.shape, dst.stride(), src.dtype, dst.dtype, src.get_device(),
           dst.get_device(), knobs)  # fmt: skip
    launcher = _copy_launchers.get(key)
    if launcher is None:
        launcher = _plan_copy(dst, src, *knobs)
        _copy_launchers[key] = launcher
    if (src.data_ptr() | dst.data_ptr()) & 15:  # the rest of the configuration is the key's
        check_base_address(src.data_ptr())
        check_base_address(dst.data_ptr())
    launcher(src, dst)
    if getattr(launcher, "checks_arguments", False):
        streak = _streaks.setdefault(knobs, _LauncherStreak())
        if streak.count(launcher):
            _tried_first[knobs] = launcher
    return dst


def copy(src: Any, tile: tuple[int, int] | None = None, stages: int | None = None) -> Any:
    """A new tensor with `src`'s shape, strides and values, copied through TMA (`copy_`)."""
    import torch

    dst = torch.empty_strided(tuple(src.shape), tuple(src.stride()), dtype=src.dtype, device=src.device)
    return copy_(dst, src, tile, stages)


# (shapes, strides, dtypes, devices, tuning) -> launcher: what a repeated copy_ looks up.
_copy_launchers: dict[tuple, Any] = {}


class _LauncherStreak:
    """Which launcher the last full lookups with one set of knobs found, how many times in a
    row, and how many in a row make it the launcher tried first: 2, doubled after each
    rejection (raising costs ~15 us of host time), so that a caller who keeps changing
    configurations (A, A, B, A, A, B, ...) soon stops paying rejections."""

    MOST_NEEDED = 64

    def __init__(self) -> None:
        self.launcher: Any = None
        self.calls = 0
        self.needed = 2

    def count(self, launcher: Any) -> bool:
        """Count a call served by `launcher`; True when it is to be tried first from now on."""
        self.calls = self.calls + 1 if launcher is self.launcher else 1
        self.launcher = launcher
        return self.calls >= self.needed

    def rejected(self) -> None:
        """The launcher tried first refused a call: ask twice as many calls in a row next time."""
        self.needed = min(2 * self.needed, self.MOST_NEEDED)


# tuning -> the streak of its full lookups, and the launcher tried first (only launchers whose
# compiled function checks its arguments). Shared by threads: a race costs a rejection at most.
_streaks: dict[tuple, _LauncherStreak] = {}
_tried_first: dict[tuple, Any] = {}


def _plan_copy(
    dst: Any,
    src: Any,
    tile: tuple[int, int] | None = None,
    stages: int | None = None,
    store_depth: int | None = None,
    blocks_per_sm: int = 1,
    as_rows: bool = False,
    evict_first: bool | None = None,
    pdl: bool = True,
    load_hint: str | None = None,
    store_hint: str | None = None,
    tile_order: str = "interleaved",
    bulk: bool = False,
) -> Any:
    """Check a copy's configuration in full and return its (cached, compiled) launcher."""
    from .plan import PipelinePlan

    if tuple(dst.shape) != tuple(src.shape) or dst.dtype != src.dtype:
        raise TmaConfigError(
            f"destination is {tuple(dst.shape)} {dst.dtype}, source {tuple(src.shape)} {src.dtype}; "
            "they must match"
        )
    if dst.device != src.device:
        raise TmaConfigError(f"destination is on {dst.device}, source on {src.device}; copy within one GPU")
    dtype = tmakit_dtype(src.dtype)
    nbytes = DTYPES[dtype].nbytes
    properties = _device_properties(src)
    sm_count = properties.multi_processor_count
    if evict_first is None:
        evict_first = 2 * src.numel() * nbytes <= properties.L2_cache_size
    transpose = _major(tuple(src.stride())) != _major(tuple(dst.stride()))
    compact = src.is_contiguous() and dst.is_contiguous()
    view = None if transpose or not (as_rows or bulk) or not compact else rows_view(src.numel(), nbytes)
    if bulk and view is None:
        raise TmaConfigError(
            f"bulk copy of {tuple(src.shape)} {dtype} with strides {tuple(src.stride())} into "
            f"{tuple(dst.stride())}: it needs both tensors compact (contiguous) and a number of "
            f"elements that {min(ROW_VIEW_WIDTHS)} divides"
        )
    if view is not None:
        checked_tensor(src, any_rank=True)  # device, dtype, alignment (the view's tile comes next)
        checked_tensor(dst, any_rank=True)
        tile = tuple(tile or rows_view_tile(*view, nbytes, sm_count))
        source, destination = LoadConfig(view, dtype, tile), None
    else:
        tile = tuple(tile or copy_tile(dtype, transpose))
        source = config_for(src, tile)
        destination = config_for(dst, tile)
        if source.element_strides == destination.element_strides:
            destination = None  # the default destination: the source's own layout
    load = LoadPlan(source)
    if stages is None:
        stages = min(
            copy_stages(math.prod(tile) * nbytes), PipelinePlan(load, 1, transpose=transpose).max_stages
        )
    pipeline = PipelinePlan(
        load,
        stages=stages,
        consumer_warps=4 if transpose else 1,
        persistent=True,
        sm_count=sm_count,
        blocks_per_sm=blocks_per_sm,
        transpose=transpose,
        store_depth=store_depth or max(2, stages // 2),
        evict_first=evict_first,
        pdl=pdl,
        load_hint=load_hint,
        store_hint=store_hint,
        tile_order=tile_order,
        bulk=bulk,
    )
    tensor_shape = tuple(src.shape) if view is not None else None
    return _copy_launcher(pipeline, destination, tensor_shape, str(src.device))


def _device_properties(tensor: Any) -> Any:
    import torch

    return torch.cuda.get_device_properties(tensor.device)


@functools.lru_cache(maxsize=128)
def _copy_launcher(pipeline: Any, destination: Any, tensor_shape: Any, device: str) -> Any:
    """A callable (src, dst) for one configuration on one device (its hang-guard words live
    there), compiled once (`tensor_shape`: called with compact tensors of this shape, viewed as
    the plan's rows). Through the DSL's TVM-FFI path when `apache-tvm-ffi` is installed
    (torch tensors passed directly, torch's current stream taken by the compiled function itself,
    the compiled function kept on disk); otherwise the plain path."""
    import importlib.util

    from . import gpu
    from .compile import to_cute_tensor
    from .pipelines import compile_pipelined_load, new_guard

    guard = new_guard(device)
    if importlib.util.find_spec("tvm_ffi") is None:
        plain = compile_pipelined_load(pipeline, "copy", destination=destination, tensor_shape=tensor_shape)
        cute_guard = to_cute_tensor(guard)
        return lambda src, dst: plain(
            to_cute_tensor(src), to_cute_tensor(dst), cute_guard, gpu.current_stream()
        )
    compiled = compile_pipelined_load(
        pipeline, "copy", tvm_ffi=True, destination=destination, tensor_shape=tensor_shape
    )
    function = compiled.function

    def launch(src: Any, dst: Any) -> None:
        function(src, dst, guard)

    launch.compiled = compiled  # how it was built (compile time, from the disk cache or not)
    launch.checks_arguments = True  # the TVM-FFI function raises on a tensor it was not built for
    return launch
