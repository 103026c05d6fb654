"""Bad inputs to the torch/numpy API: each is refused with a TmaConfigError that names the
value, the rule and the fix, before anything compiles or launches and before CUDA device properties
are read; torch missing is an ImportError naming the `gpu` extra. CPU only, but for the `gpu` tests
at the end: the torch tests run where torch is installed (CI installs a CPU build) and skip where it
is not."""

from __future__ import annotations

import importlib.util
import re
import sys
from types import SimpleNamespace

import numpy as np
import pytest

import tmakit
from tmakit import TmaConfigError
from tmakit.api import tensors as api_tensors
from tmakit.copies import api as copies_api
from tmakit.copies import call as copies_call
from tmakit.load import api as api_load
from tmakit.reduce import call as api_reduce
from tmakit.runtime.dispatch import Dispatch
from tmakit.runtime.launch import Launcher

GPU_EXTRA = re.escape("pip install 'tmakit[gpu]'")


def refuse(*args, **kwargs):
    raise AssertionError("compiled, launched or read the device for an input that should have been refused")


@pytest.fixture(autouse=True)
def nothing_compiles(monkeypatch):
    """Any compile, launcher or device-properties read during a test fails it; each test has its own
    copy_ dispatch (nothing a test planned is found by the next)."""
    monkeypatch.setattr("tmakit.runtime.compile.compile_kernel", refuse)
    monkeypatch.setattr(copies_call, "copy_launcher", refuse)
    monkeypatch.setattr(api_reduce, "reduce_launcher", refuse)
    monkeypatch.setattr(api_reduce, "class_launcher", refuse)
    monkeypatch.setattr(api_load, "compile_tile_load", refuse)
    copies = Dispatch(copies_call.plan_copy, copies_call.check_copy_tensors)
    monkeypatch.setattr(copies_api, "_COPIES", copies)
    if importlib.util.find_spec("torch") is not None:
        import torch

        monkeypatch.setattr(torch.cuda, "get_device_properties", refuse)


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


@pytest.fixture
def host_as_gpu(torch, monkeypatch):
    """The device rule waived (CPU tensors pass as GPU ones) and an H200's properties, so that the
    checks behind it run on a CPU: what they refuse still compiles nothing. Counts property reads."""
    reads = []

    def properties(device):
        reads.append(device)
        return SimpleNamespace(multi_processor_count=132, L2_cache_size=60 * 2**20)

    monkeypatch.setattr(api_tensors, "check_on_gpu", lambda tensor, name: None)
    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    return reads


def half(torch, *shape):
    return torch.zeros(*shape, dtype=torch.float16)


# -- config_for on numpy arrays and things that are not arrays (no torch needed) --------------------
@pytest.mark.parametrize("value, name", [(None, "None"), ([[1.0, 2.0]], "list"), ("x", "str"), (3, "int")])
def test_config_for_refuses_what_is_not_an_array(value, name):
    with pytest.raises(
        TmaConfigError, match=f"config_for takes a torch tensor or a numpy array; got {name} "
    ):
        tmakit.config_for(value)


@pytest.mark.parametrize(
    "array, message",
    [
        (np.zeros((0, 64), np.float16), r"tensor of shape \(0, 64\) has no elements \(dim 0 is 0\)"),
        (np.zeros((64, 0), np.float16), r"has no elements \(dim 1 is 0\).*skip the load"),
        (np.zeros(64, np.float16), "tensor has 1 dimensions; tmakit loads 2 to 5"),
        (
            np.broadcast_to(np.zeros((1, 64), np.float16), (64, 64)),
            r"stride of dim 0 is 0 \(a broadcast view\)",
        ),
        (np.zeros((64, 64), np.float16)[::-1], "stride of dim 0 is -64 .*numpy.ascontiguousarray"),
        (np.zeros((64, 64), np.float64), "dtype float64 is not supported"),
    ],
)
def test_config_for_refuses_numpy_arrays_tma_cannot_load(array, message):
    with pytest.raises(TmaConfigError, match=message):
        tmakit.config_for(array, tile=(64, 64), on_gpu=False)


def test_a_numpy_array_is_host_memory():
    with pytest.raises(TmaConfigError, match=r"tensor is on cpu; .*torch.as_tensor\(array, device='cuda'\)"):
        tmakit.config_for(np.zeros((64, 64), np.float16))


# -- without torch: an ImportError naming the extra -------------------------------------------------
@pytest.mark.parametrize(
    "call",
    [
        lambda a: tmakit.copy_(a, a),
        lambda a: tmakit.copy_(None, None),
        lambda a: tmakit.copy(a),
        lambda a: tmakit.load_tiles(a),
        lambda a: tmakit.padded_empty((64, 64), "fp16"),
    ],
    ids=["copy_", "copy_(None)", "copy", "load_tiles", "padded_empty"],
)
def test_without_torch_the_torch_functions_name_the_extra(monkeypatch, call):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    with pytest.raises(ImportError, match=GPU_EXTRA) as raised:
        call(np.zeros((64, 64), np.float16))
    assert not isinstance(raised.value, TmaConfigError)  # a missing dependency, not a bad configuration


def test_without_torch_config_for_still_reads_numpy(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    config = tmakit.config_for(np.zeros((64, 64), np.float16), tile=(64, 64), on_gpu=False)
    assert (config.shape, config.dtype) == ((64, 64), "fp16")


# -- the dispatch: arguments whose signature cannot be read; the fast path checks nothing ----------
class Tensor:
    """A stand-in tensor (what the dispatch reads)."""

    def __init__(self, shape=(64, 64), address=4096):
        self.shape, self.dtype, self.address = shape, "float16", address

    def stride(self):
        return (self.shape[1], 1)

    def get_device(self):
        return 0

    def data_ptr(self):
        return self.address

    def element_size(self):
        return 2


class CheckingKernel:
    """A compiled function that refuses what is not a tensor, counting its launches."""

    def __init__(self):
        self.calls = 0

    def __call__(self, dst, src):
        if not isinstance(src, Tensor) or not isinstance(dst, Tensor):
            raise TypeError("Mismatched type")  # as a TVM-FFI function refuses a foreign argument
        self.calls += 1


def test_unreadable_arguments_get_the_checks_error_and_the_fast_path_checks_nothing():
    checked, kernel = [], CheckingKernel()
    launcher = Launcher(kernel, checks_arguments=True)

    def check(dst, src):
        checked.append((dst, src))
        if not isinstance(src, Tensor):
            raise TmaConfigError(f"got {type(src).__name__}")

    dispatch = Dispatch(lambda dst, src, options, facts: launcher, check)
    dst, src = Tensor(), Tensor()
    for _ in range(4):
        assert dispatch.call(dst, src, None, None, {}) is dst
    assert kernel.calls == 4 and dispatch.tried_first()  # the last two were tried first
    assert checked == []  # readable tensors: the check is the planner's, never the dispatch's
    with pytest.raises(TmaConfigError, match="got list"):
        dispatch.call(dst, [1, 2], None, None, {})  # the launcher tried first refuses, the lookup names why
    assert len(checked) == 1
    assert dispatch.call(dst, src, None, None, {}) is dst and kernel.calls == 5


def test_without_a_check_the_unreadable_arguments_error_is_raised():
    dispatch = Dispatch(refuse)
    with pytest.raises(AttributeError):
        dispatch.call(Tensor(), None, None, None, {})


def test_a_launcher_that_moves_nothing_needs_no_aligned_address():
    nothing = Launcher(lambda dst, src: None, moves_nothing=True)
    dispatch = Dispatch(lambda dst, src, options, facts: nothing)
    dst = Tensor(shape=(0, 64), address=4098)  # an empty copy's launcher moves nothing
    for _ in range(2):  # planned, then found
        assert dispatch.call(dst, Tensor(shape=(0, 64), address=4097), None, None, {}) is dst


# -- torch tensors TMA cannot reach --------------------------------------------------------------------
# Values only a plan refuses (an unknown name such as load_hint="nope" is refused with the options,
# before the tensors are read: test_wrong_option_values_are_named_before_the_tensors).
BAD_KNOBS = [{}, {"tile": (7, 7)}, {"stages": 0}, {"bulk": True}, {"as_rows": True}]


@pytest.mark.parametrize("knobs", BAD_KNOBS, ids=lambda knobs: ",".join(knobs) or "default")
@pytest.mark.parametrize("rows", [64, 0])
def test_copy_of_cpu_tensors_is_refused_before_the_device_is_read(torch, knobs, rows):
    """Found by the fuzz: torch.cuda.get_device_properties ran first ("Found no NVIDIA driver")."""
    src = half(torch, rows, 64)
    with pytest.raises(
        TmaConfigError, match=r"dst is on cpu; TMA loads from GPU memory, move it with .cuda\(\)"
    ):
        tmakit.copy_(torch.empty_like(src), src, **knobs)
    with pytest.raises(TmaConfigError, match=r"src is on cpu; .*\.cuda\(\) first"):
        tmakit.copy(src, strict=True, **knobs)


def test_wrong_option_values_are_named_before_the_tensors(torch):
    src = half(torch, 64, 64)
    with pytest.raises(TmaConfigError, match="copy option load_hint 'nope' is not one of"):
        tmakit.copy_(torch.empty_like(src), src, load_hint="nope")


@pytest.mark.parametrize("call", [tmakit.load_tiles, tmakit.config_for], ids=["load_tiles", "config_for"])
def test_loads_of_cpu_tensors_are_refused(torch, call):
    with pytest.raises(TmaConfigError, match=r"tensor is on cpu; TMA loads from GPU memory"):
        call(half(torch, 64, 64))


def not_tensors(torch):
    return [
        (np.zeros((64, 64), np.float16), r"numpy\.ndarray of shape \(64, 64\) float16"),
        ([[0.0] * 64] * 64, "list"),
        (None, "None"),
    ]


def test_copy_takes_torch_tensors(torch):
    tensor = half(torch, 64, 64)
    fix = re.escape("(convert it with torch.as_tensor(value, device='cuda'))")
    for value, name in not_tensors(torch):
        with pytest.raises(
            TmaConfigError, match=f"copy_ takes torch tensors on a CUDA device; got {name} as src {fix}"
        ):
            tmakit.copy_(tensor, value)
        with pytest.raises(
            TmaConfigError, match=f"copy_ takes torch tensors on a CUDA device; got {name} as dst"
        ):
            tmakit.copy_(value, tensor)
        with pytest.raises(
            TmaConfigError, match=f"copy takes torch tensors on a CUDA device; got {name} as src"
        ):
            tmakit.copy(value)
        with pytest.raises(
            TmaConfigError, match=f"load_tiles takes torch tensors on a CUDA device; got {name} "
        ):
            tmakit.load_tiles(value)


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda t: t.to_sparse(),
            r"has layout torch\.sparse_coo; TMA loads dense strided memory: .*\.to_dense\(\)",
        ),
        (lambda t: t.to_sparse_csr(), r"has layout torch\.sparse_csr"),
        (lambda t: t.to("meta"), r"is on the meta device \(a shape and a dtype, no memory\)"),
    ],
    ids=["sparse_coo", "sparse_csr", "meta"],
)
def test_tensors_without_dense_memory_are_refused(torch, make, message):
    bad, good = make(half(torch, 64, 64)), half(torch, 64, 64)
    index = torch.tensor([0, 1])
    tmakit.gather_rows(good, index)  # a plain call first: the repeated-call lookup is armed
    for call in (
        lambda: tmakit.gather_rows(bad, index),
        lambda: tmakit.gather_rows(good, index, bad),
        lambda: tmakit.scatter_rows_(bad, index, good[:2]),
        lambda: tmakit.index_add_(bad, index, good[:2]),
        lambda: tmakit.copy_(good, bad),
        lambda: tmakit.copy_(bad, good),
        lambda: tmakit.copy_(bad, bad),
        lambda: tmakit.copy(bad),
        lambda: tmakit.load_tiles(bad),
        lambda: tmakit.config_for(bad),
        lambda: tmakit.config_for(bad, on_gpu=False),
    ):
        with pytest.raises(TmaConfigError, match=message):
            call()


@pytest.mark.parametrize(
    "dst, message",
    [
        (
            lambda torch: half(torch, 32, 64),
            r"destination is \(32, 64\) torch\.float16, source \(64, 64\) torch\.float16",
        ),
        (
            lambda torch: torch.zeros(64, 64),
            r"destination is \(64, 64\) torch\.float32, source \(64, 64\) torch\.float16",
        ),
        (lambda torch: half(torch, 0, 64), r"destination is \(0, 64\)"),
    ],
    ids=["shape", "dtype", "empty"],
)
def test_a_copy_between_mismatched_tensors_is_refused(torch, dst, message):
    with pytest.raises(TmaConfigError, match=message + r".*must match \(tmakit\.copy\(src\) allocates"):
        tmakit.copy_(dst(torch), half(torch, 64, 64))


def test_expanded_tensors_are_refused(torch):
    expanded = half(torch, 1, 64).expand(64, 64)
    with pytest.raises(TmaConfigError, match=r"stride of dim 0 is 0 \(a broadcast view\).*\.contiguous\(\)"):
        tmakit.config_for(expanded, tile=(16, 64), on_gpu=False)
    with pytest.raises(TmaConfigError, match="dst is on cpu"):
        tmakit.copy_(half(torch, 64, 64), expanded)


def test_empty_tensors_are_not_loaded(torch):
    with pytest.raises(TmaConfigError, match=r"tensor of shape \(4, 0, 64\) has no elements \(dim 1 is 0\)"):
        tmakit.config_for(half(torch, 4, 0, 64), on_gpu=False)


# -- behind the device rule (CPU tensors standing in for GPU ones) -----------------------------------
@pytest.mark.parametrize(
    "knobs, message",
    [
        ({"tile": (7, 7)}, "14 bytes; TMA needs a multiple of 16 bytes"),
        ({"stages": 0}, "0 stages; a ring needs at least 1"),
        ({"load_hint": "nope"}, "load_hint 'nope' is not one of"),
        ({"tile": (16, 512)}, "its columns are 512; a TMA box dimension must be 1..256"),
        ({"bulk": True, "tile": (1, 64)}, r"bulk copy cannot take tile \(1, 64\)"),
        ({"tile_order": "x"}, "tile_order 'x' is not one of"),
        ({"blocks_per_sm": 0}, "blocks_per_sm 0 must be >= 1"),
        ({"colour": "red"}, "unknown copy option colour; tmakit.CopyOptions has tile, "),
    ],
    ids=["tile", "stages", "hint", "box", "bulk-tile", "tile-order", "blocks-per-sm", "unknown"],
)
def test_bad_knobs_are_refused_before_compiling(torch, host_as_gpu, knobs, message):
    src = half(torch, 64, 64)
    with pytest.raises(TmaConfigError, match=message):
        tmakit.copy_(torch.empty_like(src), src, **knobs)


def test_a_bulk_copy_of_a_strided_tensor_is_refused(torch, host_as_gpu):
    src = half(torch, 64, 64).t()
    with pytest.raises(TmaConfigError, match="bulk copy of .* needs both tensors compact"):
        tmakit.copy_(torch.empty_like(src), src, bulk=True)


def test_an_expanded_tensor_is_refused_through_copy(torch, host_as_gpu):
    expanded = half(torch, 1, 64).expand(64, 64)
    with pytest.raises(TmaConfigError, match=r"stride of dim 0 is 0 \(a broadcast view\)"):
        tmakit.copy_(half(torch, 64, 64), expanded)
    with pytest.raises(TmaConfigError, match=r"stride of dim 0 is 0 \(a broadcast view\)"):
        tmakit.copy(expanded)


@pytest.mark.parametrize("shape", [(0, 64), (64, 0), (3, 0, 5), (0,)])
def test_an_empty_copy_returns_the_destination_untouched(torch, host_as_gpu, shape):
    """As torch's copy_: no compile, no launch, no device read, after the shape/dtype/device checks."""
    src = torch.zeros(shape, dtype=torch.float16)
    dst = torch.empty_like(src)
    assert tmakit.copy_(dst, src) is dst
    assert tmakit.copy_(dst, src, stages=8) is dst
    copied = tmakit.copy(src)
    assert copied.shape == src.shape and copied.dtype == src.dtype
    assert host_as_gpu == []  # no device properties read
    with pytest.raises(TmaConfigError, match="must match"):
        tmakit.copy_(torch.empty(shape, dtype=torch.float32), src)


def test_an_empty_tensor_is_not_loaded(torch, host_as_gpu):
    with pytest.raises(TmaConfigError, match=r"has no elements \(dim 0 is 0\)"):
        tmakit.load_tiles(half(torch, 0, 64))


# -- padded_empty -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        (
            ((64,), "fp16"),
            {},
            r"shape \(64,\) has rank 1; tmakit allocates and loads ranks 2 to 5 .*\(1, N\)",
        ),
        (((2,) * 6, "fp16"), {}, r"has rank 6; .*merge batch dims"),
        (((), "fp16"), {}, "has rank 0"),
        (("64x64", "fp16"), {}, r"shape '64x64' is not a tuple of whole numbers; pass e\.g\. \(1000, 777\)"),
        ((None, "fp16"), {}, "shape None is not a tuple of whole numbers"),
        (((64.0, 64), "fp16"), {}, "not a tuple of whole numbers"),
        (((-1, 64), "fp16"), {}, r"shape \(-1, 64\) has a negative extent in dim 0"),
        (((64, 64), "fp16"), {"major": "diag"}, "major 'diag' is not a layout; use 'row' .* or 'col'"),
        (((64, 64), "fp64"), {}, "dtype fp64 is not supported"),
    ],
)
def test_padded_empty_refuses_bad_arguments(torch, args, kwargs, message):
    with pytest.raises(TmaConfigError, match=message):
        tmakit.padded_empty(*args, device="cpu", **kwargs)


def test_padded_empty_pads_the_contiguous_dim(torch):
    rows = tmakit.padded_empty((1000, 777), torch.bfloat16, device="cpu")
    assert (rows.shape, rows.stride(), rows.dtype) == ((1000, 777), (784, 1), torch.bfloat16)
    cols = tmakit.padded_empty(torch.Size([4, 777, 100]), "fp16", major="col", device="cpu")
    assert (cols.shape, cols.stride()) == ((4, 777, 100), (784 * 100, 1, 784))


# -- on a Hopper GPU: the same rules with real CUDA tensors -------------------------------------------
@pytest.mark.gpu
def test_gpu_empty_copy_and_refusals(torch, monkeypatch):
    monkeypatch.undo()  # the real device properties
    copies = Dispatch(copies_call.plan_copy, copies_call.check_copy_tensors)
    monkeypatch.setattr(copies_api, "_COPIES", copies)
    cuda = torch.zeros(64, 64, dtype=torch.float16, device="cuda")
    empty = torch.zeros(0, 64, dtype=torch.float16, device="cuda")
    monkeypatch.setattr("tmakit.runtime.compile.compile_kernel", refuse)
    monkeypatch.setattr(copies_call, "copy_launcher", refuse)
    monkeypatch.setattr(api_reduce, "reduce_launcher", refuse)
    monkeypatch.setattr(api_reduce, "class_launcher", refuse)
    assert tmakit.copy_(torch.empty_like(empty), empty).shape == (0, 64)
    assert tmakit.copy(empty).shape == (0, 64)
    with pytest.raises(TmaConfigError, match="src is on cpu"):
        tmakit.copy_(cuda, cuda.cpu())
    with pytest.raises(TmaConfigError, match="dst is on cpu"):
        tmakit.copy_(cuda.cpu(), cuda)
    row = torch.zeros(1, 64, dtype=torch.float16, device="cuda")  # apart from dst: no overlap to name first
    with pytest.raises(TmaConfigError, match=r"stride of dim 0 is 0 \(a broadcast view\)"):
        tmakit.copy_(cuda, row.expand(64, 64))
    with pytest.raises(TmaConfigError, match="has no elements"):
        tmakit.config_for(empty)
    with pytest.raises(TmaConfigError, match="has no elements"):
        tmakit.load_tiles(empty)


def test_a_gpu_that_is_not_a_hopper_gets_torchs_path_or_a_named_refusal(torch, monkeypatch):
    """On a CUDA device of another compute capability (an A100's 8.0): a route's facts name it
    (`plan.route.NOT_SM90`, torch's op serves the call) and a strict call is refused naming it."""
    from types import SimpleNamespace

    from tmakit.plan.route import NOT_SM90

    monkeypatch.setattr(api_tensors, "is_sm90", lambda index: False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: (8, 0))
    a100 = SimpleNamespace(is_cuda=True, device=SimpleNamespace(type="cuda"), get_device=lambda: 0)
    assert api_tensors.cuda_index(a100) == NOT_SM90
    with pytest.raises(TmaConfigError, match=r"x is on cuda:0, a GPU of compute capability 8\.0; .*sm_90a"):
        api_tensors.check_on_gpu(a100, "x")
