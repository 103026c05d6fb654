"""Served or refused, and a refusal writes nothing: every public entry and op, on CPU and meta
tensors, given derandomized draws of valid and invalid arguments (shapes that do not broadcast,
views that overlap themselves or each other, leaves that require grad, inference tensors, bad
indexes and options). A call either returns or raises TmaConfigError, and a refused call leaves
every byte of every storage it was given as it was. Then the rules that make that so: torch's
`copy_` refusals predicted without copying, the same options refused on a CPU as on a (stand-in)
Hopper GPU, and the contract's small print (one version bump per write, `rows_path`'s Route,
`copy_path(strict=)`, `TorchOpError`, the CPU's and the meta device's calls apart)."""

from __future__ import annotations

import contextlib
import importlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="the torch API needs torch")

import tmakit  # noqa: E402
import tmakit.ops  # noqa: E402, F401  registers the ops
from tmakit import TmaConfigError, TorchOpError  # noqa: E402

SETTINGS = settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
DTYPES = (torch.float32, torch.float16, torch.int32, torch.int64, torch.uint8, torch.bool)


# -- tensors the draws are made of ------------------------------------------------------------------
@st.composite
def tensors(draw, shape: tuple[int, ...] | None = None, base: torch.Tensor | None = None) -> torch.Tensor:
    """A tensor of `shape` (drawn when None): fresh, a view into `base` (a shared storage: an
    offset slice, perhaps overlapping another view of it), transposed, expanded (it overlaps
    itself), of another dtype, a leaf that requires grad, an inference tensor or a meta one."""
    if shape is None:
        shape = draw(st.sampled_from([(4, 8), (8, 4), (3, 5), (4, 8, 2), (16,), (5,), (0, 8), ()]))
    numel = 1
    for extent in shape:
        numel *= extent
    kind = draw(
        st.sampled_from(
            ["fresh", "fresh", "view", "view", "transposed", "expanded", "dtype", "grad", "inference", "meta"]
        )
    )
    dtype = draw(st.sampled_from(DTYPES)) if kind == "dtype" else torch.float32
    if kind == "view" and base is not None and numel <= base.numel() - 8:
        offset = draw(st.integers(0, 8))
        return base.view(-1)[offset : offset + numel].view(shape)
    if kind == "transposed" and len(shape) == 2:
        return position_values(shape[::-1]).t()
    if kind == "expanded" and shape and numel:
        return position_values((1, *shape[1:])).expand(shape)
    if kind == "grad" and dtype.is_floating_point:
        return position_values(shape).requires_grad_()
    if kind == "inference":
        with torch.inference_mode():
            return position_values(shape)
    if kind == "meta":
        return torch.empty(shape, device="meta")
    return position_values(shape, dtype)


def position_values(shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Each element its own position (mod 100), so a write is seen wherever it lands."""
    numel = 1
    for extent in shape:
        numel *= extent
    return (torch.arange(numel) % 100).to(dtype).reshape(shape)


@st.composite
def indexes(draw, rows: int, count: int | None = None) -> object:
    """An index of `count` entries for a table of `rows` rows: in range, out of range, negative,
    int32 or int64, 2-D, a float tensor, or not a tensor."""
    count = draw(st.integers(0, 4)) if count is None else count
    kind = draw(st.sampled_from(["good", "good", "good", "high", "negative", "int32", "2d", "float", "list"]))
    entries = [draw(st.integers(0, max(rows - 1, 0))) for _ in range(count)]
    if kind == "high" and count:
        entries[-1] = rows + draw(st.integers(0, 3))
    if kind == "negative" and count:
        entries[0] = -1
    if kind == "list":
        return entries
    index = torch.tensor(entries, dtype=torch.int32 if kind == "int32" else torch.int64)
    if kind == "2d":
        return index.reshape(1, -1)
    return index.float() if kind == "float" else index


OPTIONS = st.one_of(
    st.just({}),
    st.builds(
        lambda rows, cols: {"tile": (rows, cols)},
        st.sampled_from([1, 7, 8, 16, 64, 256]),
        st.sampled_from([1, 7, 8, 16, 64, 256]),
    ),
    st.builds(lambda stages: {"stages": stages}, st.sampled_from([0, 1, 4, 28, 29, 1000])),
    st.builds(lambda depth: {"store_depth": depth}, st.sampled_from([0, 1, 8])),
    st.builds(lambda blocks: {"blocks_per_sm": blocks}, st.sampled_from([0, 1, 2, 64])),
    st.just({"bulk": True}),
    st.just({"as_rows": True}),
    st.just({"tile_order": "diagonal"}),
)


# -- every entry that writes: (its name, how to draw a call, the tensors it may write) ----------
def snapshot(values: list) -> list:
    """Every byte of every storage among `values` (tensors, or lists of them), meta tensors and
    inference tensors included as what can be read of them."""
    saved = []
    for value in values:
        for tensor in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(tensor, torch.Tensor) and not tensor.is_meta:
                storage = tensor.untyped_storage()
                saved.append((storage, torch.empty(0, dtype=torch.uint8).set_(storage).clone()))
    return saved


def unchanged(saved: list) -> bool:
    return all(
        torch.equal(torch.empty(0, dtype=torch.uint8).set_(storage), before) for storage, before in saved
    )


@st.composite
def copy_calls(draw, function):
    base = position_values((64,))
    dst = draw(tensors(base=base))
    src = draw(tensors(shape=draw(st.sampled_from([tuple(dst.shape), (1, *dst.shape[1:]), (7,)])), base=base))
    return (lambda: function(dst, src, **draw(OPTIONS))), [dst, src, base]


@st.composite
def reduce_calls(draw, function):
    base = position_values((64,))
    dst, src = draw(tensors(base=base)), draw(tensors(base=base))
    op = draw(st.sampled_from(["add", "max", "min", "and", "sum", "amax", "foo"]))
    return (lambda: function(dst, src, op, **draw(OPTIONS))), [dst, src, base]


@st.composite
def list_calls(draw, function):
    base = position_values((256,))
    count = draw(st.integers(1, 4))
    dsts = [draw(tensors(base=base)) for _ in range(count)]
    srcs = [draw(tensors(shape=draw(st.sampled_from([tuple(d.shape), (3,)])), base=base)) for d in dsts]
    return (lambda: function(dsts, srcs)), [dsts, srcs, base]


@st.composite
def pack_calls(draw, function):
    items = [draw(tensors()) for _ in range(draw(st.integers(1, 3)))]
    out = draw(st.sampled_from([None, "short", "right", "wrong dtype"]))
    length = sum(-(-t.numel() * 4 // 16) * 4 for t in items) + 4
    buffer = {
        None: None,
        "short": torch.zeros(1),
        "right": torch.zeros(length),
        "wrong dtype": torch.zeros(length, dtype=torch.float64),
    }[out]
    call = (lambda: function(items, buffer)) if function is tmakit.pack else (lambda: function(items))
    return call, [items, buffer]


@st.composite
def unpack_calls(draw, function):
    items = [draw(tensors()) for _ in range(draw(st.integers(1, 3)))]
    flat = draw(
        st.sampled_from([torch.arange(4.0), torch.arange(256.0), torch.arange(256, dtype=torch.int32)])
    )
    return (lambda: function(flat, items)), [items, flat]


@st.composite
def rows_calls(draw, function, op):
    table = draw(tensors(shape=draw(st.sampled_from([(6, 4), (6, 4, 2), (6,), ()]))))
    rows = table.shape[0] if table.dim() else 1
    index = draw(indexes(rows))
    count = index.numel() if isinstance(index, torch.Tensor) else len(index)
    compact = draw(
        tensors(shape=draw(st.sampled_from([(count, *table.shape[1:]), (count + 1, *table.shape[1:])])))
    )
    extra = {}
    if op == "reduce":
        extra = {"reduce": draw(st.sampled_from(["amax", "amin", "prod", "mean", "sum"]))}
    if op == "add":
        extra = {"alpha": draw(st.sampled_from([1, 2, 0.5]))}
    if op == "gather":
        return (lambda: function(table, index, compact if draw(st.booleans()) else None)), [table, compact]
    return (lambda: function(table, index, compact, **extra)), [table, compact, index]


@st.composite
def im2col_calls(draw, function):
    x = draw(tensors(shape=draw(st.sampled_from([(1, 5, 5, 8), (2, 4, 4, 3)]))))
    out = draw(tensors(shape=draw(st.sampled_from([(25, 72), (32, 27), (3, 3)]))))
    return (lambda: function(x, 3, padding=1, out=out)), [x, out]


@st.composite
def grouped_calls(draw, function):
    call, written = draw(list_calls(lambda dsts, srcs: tmakit.GroupedCopy(dsts, srcs)()))
    return call, written


ops = torch.ops.tmakit
ENTRIES = {
    "copy_": copy_calls(tmakit.copy_),
    "add_": copy_calls(tmakit.add_),
    "reduce_into_": reduce_calls(tmakit.reduce_into_),
    "copy_many_": list_calls(tmakit.copy_many_),
    "GroupedCopy": grouped_calls(None),
    "pack": pack_calls(tmakit.pack),
    "unpack_": unpack_calls(tmakit.unpack_),
    "GroupedCopy.unpacking": unpack_calls(lambda flat, items: tmakit.GroupedCopy.unpacking(flat, items)()),
    "gather_rows": rows_calls(tmakit.gather_rows, "gather"),
    "scatter_rows_": rows_calls(tmakit.scatter_rows_, "scatter"),
    "index_add_": rows_calls(tmakit.index_add_, "add"),
    "index_reduce_": rows_calls(tmakit.index_reduce_, "reduce"),
    "im2col": im2col_calls(tmakit.im2col),
    "torch.ops.tmakit.copy_": copy_calls(lambda dst, src, **options: ops.copy_(dst, src, **options)),
    "torch.ops.tmakit.reduce_into_": reduce_calls(
        lambda dst, src, op, **options: ops.reduce_into_(dst, src, op)
    ),
    "torch.ops.tmakit.copy_many_": list_calls(ops.copy_many_),
    "torch.ops.tmakit.unpack_": unpack_calls(ops.unpack_),
    "torch.ops.tmakit.scatter_rows_": rows_calls(ops.scatter_rows_, "scatter"),
    "torch.ops.tmakit.index_add_": rows_calls(lambda t, i, c, alpha: ops.index_add_(t, i, c), "add"),
    "torch.ops.tmakit.index_reduce_": rows_calls(ops.index_reduce_, "reduce"),
}


@pytest.mark.parametrize("name", sorted(ENTRIES))
@SETTINGS
@given(data=st.data())
def test_a_refused_call_leaves_every_byte_as_it_was(name, data):
    call, written = data.draw(ENTRIES[name], label="call")
    saved = snapshot(written)
    refused = None
    grad = data.draw(st.booleans(), label="grad mode")
    with torch.set_grad_enabled(grad), warnings_off():
        try:
            call()
        except TmaConfigError as error:
            refused = error
        except RuntimeError as error:  # torch's dispatcher refusing a value the schema does not take
            if not (name.startswith("torch.ops.") and "Expected a value of type" in str(error)):
                raise AssertionError(f"{name} raised {type(error).__name__}: {error}") from error
            refused = error
        except Exception as error:  # the contract: returned, or TmaConfigError
            raise AssertionError(f"{name} raised {type(error).__name__}: {error}") from error
    if refused is not None:
        assert unchanged(saved), f"{name} refused ({refused}) after writing"


def test_every_entry_that_writes_is_drawn_on():
    """The entries above are every public function and op that writes a tensor it is given."""
    writers = {"copy_", "add_", "reduce_into_", "copy_many_", "GroupedCopy", "pack", "unpack_"}
    writers |= {"gather_rows", "scatter_rows_", "index_add_", "index_reduce_", "im2col"}
    in_place_ops = {
        name for name in tmakit.ops.__all__ if name.endswith("_") and name not in ("copy_kwargs",)
    }
    assert writers <= set(ENTRIES)
    assert {f"torch.ops.tmakit.{name}" for name in in_place_ops} <= set(ENTRIES)


@contextlib.contextmanager
def warnings_off():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# -- torch's copy_ refusals, predicted without copying -------------------------------------------
@SETTINGS
@given(data=st.data())
def test_torch_copy_refusal_predicts_torchs_copy(data):
    """`api.tensors.torch_copy_refusal` says None exactly where torch's own copy_ takes the pair
    (on copies of the drawn tensors, their storages shared as drawn)."""
    from tmakit.api.tensors import torch_copy_refusal

    base = position_values((64,))
    dst = data.draw(tensors(base=base), label="dst")
    shape = data.draw(st.sampled_from([tuple(dst.shape), (1, *dst.shape[1:]), (3,)]), label="src shape")
    src = data.draw(tensors(shape=shape, base=base), label="src")
    with torch.set_grad_enabled(data.draw(st.booleans(), label="grad mode")), warnings_off():
        predicted = torch_copy_refusal(dst, src)
        try:
            dst.copy_(src)
            taken = True
        except (RuntimeError, NotImplementedError):
            taken = False
    assert (predicted is None) == taken, predicted


# -- the same options refused on a CPU as on a Hopper GPU ------------------------------------------
@pytest.fixture
def on_a_stand_in_gpu(monkeypatch):
    """Returns a context in which CPU tensors pass as an H200's (`stand_ins.gpu_stand_ins`), the
    copy's real route and planner behind the device rule."""
    from stand_ins import gpu_stand_ins
    from tmakit.runtime.dispatch import Dispatch, forget_calls

    @contextlib.contextmanager
    def stand_in():
        with pytest.MonkeyPatch.context() as patch:
            gpu_stand_ins(patch)
            copies_api = importlib.import_module("tmakit.copies.api")
            copies_call = importlib.import_module("tmakit.copies.call")
            routed = Dispatch(
                copies_call.routed_copy_launcher, copies_call.check_copy_tensors, copies_call.TORCH_COPY
            )
            patch.setattr(copies_api, "_COPIES", routed)  # the call's route, not the planner alone
            forget_calls()
            yield
        forget_calls()

    return stand_in


@st.composite
def layouts(draw):
    dtype = draw(st.sampled_from([torch.float16, torch.float32, torch.int8, torch.bfloat16, torch.float64]))
    rows, cols = draw(st.sampled_from([(64, 64), (128, 256), (256, 64), (32, 1024)]))
    dst = torch.zeros(rows, cols, dtype=dtype)
    src = (
        position_values((cols, rows), dtype).t()
        if draw(st.booleans())
        else position_values((rows, cols), dtype)
    )
    return dst, src


def outcome(call) -> str:
    try:
        call()
    except TmaConfigError as error:
        return str(error)
    return "served"


@SETTINGS
@given(data=st.data())
def test_a_cpu_refuses_the_options_a_hopper_gpu_refuses(on_a_stand_in_gpu, data):
    dst, src = data.draw(layouts(), label="tensors")
    options = data.draw(OPTIONS, label="options")
    reduce = data.draw(st.sampled_from([None, "add", "max"]), label="reduce")
    if reduce is not None:
        options = {k: v for k, v in options.items() if k not in ("as_rows", "bulk")}

    def call():
        if reduce is None:
            tmakit.copy_(dst, src, **options)
        else:
            tmakit.reduce_into_(dst, src, reduce, **options)

    on_cpu = outcome(call)
    with on_a_stand_in_gpu():
        on_gpu = outcome(call)
    refused = on_cpu != "served"
    assert refused == (on_gpu != "served"), (on_cpu, on_gpu)
    if refused:  # the planner's own words, the CPU's possibly with a hint after them
        assert on_cpu.split(" (with the default")[0] == on_gpu.split(" (with the default")[0]


def test_the_issues_options_are_refused_on_a_cpu():
    dst, src = torch.zeros(16, 16), torch.ones(16, 16)
    with pytest.raises(TmaConfigError, match="multiple of 16 bytes"):
        tmakit.copy_(dst, src, tile=(7, 7))
    with pytest.raises(TmaConfigError, match="0 stages"):
        tmakit.copy_(dst, src, stages=0)
    with pytest.raises(TmaConfigError, match="1000 stages"):
        tmakit.add_(dst, src, stages=1000)
    with pytest.raises(TmaConfigError, match="1000 stages"):
        tmakit.copy_path(dst, src, stages=1000)
    assert not dst.any()


# -- the small print --------------------------------------------------------------------------------
def test_a_list_refused_by_its_last_pair_writes_none():
    d0 = torch.zeros(4)
    with pytest.raises(TorchOpError, match=r"dsts\[1\].*does not broadcast"):
        tmakit.copy_many_([d0, torch.zeros(3)], [torch.ones(4), torch.ones(5)])
    assert not d0.any()
    grouped = tmakit.GroupedCopy
    with pytest.raises(TorchOpError):
        grouped([d0, torch.zeros(3)], [torch.ones(4), torch.ones(5)])()
    assert not d0.any()


def test_torchs_refusal_is_a_runtime_error_too():
    x = torch.zeros(8)
    for call in (lambda: tmakit.copy_(x[:4], x[2:6]), lambda: tmakit.copy_many_([x[:4]], [x[2:6]])):
        with pytest.raises(RuntimeError, match="overlap|single memory location"):
            call()
        with pytest.raises(TmaConfigError):
            call()
    assert issubclass(TorchOpError, TmaConfigError) and issubclass(TorchOpError, RuntimeError)


def test_a_write_bumps_the_version_once_as_torchs_does():
    dst = torch.zeros(4, 4)
    calls = [
        lambda: tmakit.copy_(dst, torch.ones(4, 4)),
        lambda: tmakit.add_(dst, torch.ones(4, 4)),
        lambda: tmakit.reduce_into_(dst, torch.ones(4, 4), "max"),
        lambda: tmakit.scatter_rows_(dst, torch.tensor([1]), torch.ones(1, 4)),
        lambda: tmakit.index_add_(dst, torch.tensor([1]), torch.ones(1, 4)),
        lambda: tmakit.copy_many_([dst], [torch.ones(4, 4)]),
    ]
    for call in calls:
        before = dst._version
        call()
        assert dst._version == before + 1


def test_an_int32_index_is_taken_on_torchs_path():
    dst = torch.zeros(4, 8)
    tmakit.scatter_rows_(dst, torch.tensor([1], dtype=torch.int32), torch.ones(1, 8))
    assert torch.equal(dst, torch.zeros(4, 8).index_copy_(0, torch.tensor([1]), torch.ones(1, 8)))


def test_an_unchecked_bad_index_on_torchs_path_is_refused_before_a_write():
    dst = torch.zeros(4, 8)
    with pytest.raises(TmaConfigError, match=r"index\[1\] is 9"):
        tmakit.index_add_(dst, torch.tensor([1, 9]), torch.ones(2, 8), check_index=False)
    assert not dst.any()


def test_rows_path_is_a_route_and_names_an_unknown_op():
    route = tmakit.rows_path("gather", torch.zeros(4, 8), torch.tensor([1]), torch.zeros(1, 8))
    assert route.path == "torch" and route.op == "gather" and not route.by_tma
    with pytest.raises(TmaConfigError, match="op='foo'; it takes gather"):
        tmakit.rows_path("foo", torch.zeros(4, 8), torch.tensor([1]), torch.zeros(1, 8))


def test_copy_path_takes_strict_as_copy_does():
    dst, src = torch.zeros(4, 4), torch.ones(4, 4)
    with pytest.raises(TmaConfigError) as path_error:
        tmakit.copy_path(dst, src, strict=True)
    with pytest.raises(TmaConfigError) as call_error:
        tmakit.copy_(dst, src, strict=True)
    assert str(path_error.value) == str(call_error.value)
    assert tmakit.copy_path(dst, src).path == "torch"


def test_the_cpus_calls_and_the_meta_devices_are_kept_apart():
    """A meta call is refused whether or not a CPU call of the same layout came first."""
    cpu = torch.zeros(4, dtype=torch.int32)
    meta = torch.empty(4, dtype=torch.int32, device="meta")
    with pytest.raises(TmaConfigError, match="meta device") as fresh:
        tmakit.add_(meta, meta)
    tmakit.add_(cpu, cpu)
    with pytest.raises(TmaConfigError, match="meta device") as after:
        tmakit.add_(meta, meta)
    assert str(fresh.value) == str(after.value)


def test_an_inference_tensor_is_written_inside_inference_mode_alone():
    with torch.inference_mode():
        dst = torch.zeros(4)
        tmakit.copy_(dst, torch.ones(4))
    with pytest.raises(TorchOpError, match="inference"):
        tmakit.copy_(dst, torch.zeros(4))
    with pytest.raises(TorchOpError, match="inference"):
        tmakit.copy_many_([dst], [torch.zeros(4)])
    assert dst.eq(1).all()
