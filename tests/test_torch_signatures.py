"""torch's signatures where torch has them, on a CPU (whose tensors each function serves by
torch's own op): the rows functions in torch's order along any dim (`index_add_(dst, dim, index,
src, alpha=)`, ...) beside tmakit's `(dst, index, src)`, `add_(dst, src, alpha=)`,
`copy_(dst, src, non_blocking=)`, `copy_many_` returning what `torch._foreach_copy_` returns,
and the ops' schemas carrying the functions' options. Every result is compared with torch's op on
every element of position-dependent inputs; every bad argument is a TmaConfigError naming the
value and the rule, raised before anything is written."""

from __future__ import annotations

import itertools
import math

import pytest

torch = pytest.importorskip("torch", reason="the torch API needs torch")

from torch._dynamo.utils import counters  # noqa: E402

import tmakit  # noqa: E402
import tmakit.ops  # noqa: E402
from tmakit import TmaConfigError  # noqa: E402

OPS = torch.ops.tmakit


def pos(*shape, salt=0, dtype=torch.float32):
    """Every element names its position and `salt` (exact small integers)."""
    values = torch.arange(math.prod(shape), dtype=torch.float64) + 1000 * salt
    return values.to(dtype).view(shape)


TABLE = (4, 5, 6)
DIMS = (0, 1, 2, -1, -2, -3)


def index_along(dim, count=4, repeated=True):
    """`count` entries along `dim` of TABLE, the last and first included; repeated when asked."""
    rows = TABLE[dim]
    entries = [rows - 1, 0, rows - 1, 1] if repeated else [rows - 1, 0, 1, 2 % rows]
    return torch.tensor(entries[:count])


def compact_along(dim, count=4, salt=1):
    shape = list(TABLE)
    shape[dim] = count
    return pos(*shape, salt=salt)


# -- rows in torch's order -------------------------------------------------------------------------
@pytest.mark.parametrize("dim", DIMS)
def test_gather_rows_along_any_dim_is_index_select(dim):
    x, index = pos(*TABLE), index_along(dim)
    want = torch.index_select(x, dim, index)
    got = tmakit.gather_rows(x, dim, index)
    assert torch.equal(got, want) and got.stride() == want.stride()
    out = torch.full_like(want, -1.0)
    assert tmakit.gather_rows(x, dim, index, out=out) is out and torch.equal(out, want)
    out = torch.full_like(want, -1.0)
    assert tmakit.gather_rows(x, dim, index, out) is out and torch.equal(out, want)  # out by place


@pytest.mark.parametrize("dim", DIMS)
def test_scatter_rows_along_any_dim_is_index_copy(dim):
    x, index, src = pos(*TABLE), index_along(dim, repeated=False), compact_along(dim)
    want = x.clone().index_copy_(dim, index, src)
    dst = x.clone()
    assert tmakit.scatter_rows_(dst, dim, index, src) is dst and torch.equal(dst, want)


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("alpha", [1, 3, -0.5])
def test_index_add_along_any_dim_is_torchs(dim, alpha):
    x, index, src = pos(*TABLE), index_along(dim), compact_along(dim)
    want = x.clone().index_add_(dim, index, src, alpha=alpha)
    dst = x.clone()
    assert tmakit.index_add_(dst, dim, index, src, alpha=alpha) is dst and torch.equal(dst, want)


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize(
    "reduce, include_self", itertools.product(("amax", "amin", "prod", "mean"), (True, False))
)
def test_index_reduce_along_any_dim_is_torchs(dim, reduce, include_self):
    x, index, src = pos(*TABLE, salt=2), index_along(dim), compact_along(dim)
    want = x.clone().index_reduce_(dim, index, src, reduce, include_self=include_self)
    dst = x.clone()
    got = tmakit.index_reduce_(dst, dim, index, src, reduce, include_self=include_self)
    assert got is dst and torch.equal(dst, want)


def test_int32_index_and_an_int64_dims_type_along_a_dim():
    x = pos(*TABLE)
    index = index_along(1).to(torch.int32)
    import numpy as np

    assert torch.equal(tmakit.gather_rows(x, np.int64(1), index), torch.index_select(x, 1, index))
    dst = x.clone()
    tmakit.scatter_rows_(dst, 1, index_along(1, repeated=False).int(), compact_along(1))
    assert torch.equal(dst, x.clone().index_copy_(1, index_along(1, repeated=False), compact_along(1)))


def test_tmakits_order_is_kept():
    """(dst, index, src): a tensor where torch's order has the dim is the index, dim 0; each
    argument after it one place along, given by place or by name."""
    x, index = pos(*TABLE), torch.tensor([3, 0, 3])
    src = pos(3, 5, 6, salt=1)
    want = torch.index_select(x, 0, index)
    assert torch.equal(tmakit.gather_rows(x, index), want)
    for call in (
        lambda out: tmakit.gather_rows(x, index, out),
        lambda out: tmakit.gather_rows(x, index, out=out),
        lambda out: tmakit.gather_rows(x, index=index, out=out),
    ):
        out = torch.zeros(3, 5, 6)
        assert call(out) is out and torch.equal(out, want)
    for call, torch_call in (
        (lambda d: tmakit.index_add_(d, index, src, alpha=2), lambda d: d.index_add_(0, index, src, alpha=2)),
        (lambda d: tmakit.index_add_(d, index=index, src=src), lambda d: d.index_add_(0, index, src)),
        (
            lambda d: tmakit.scatter_rows_(d, index[1:], src[1:]),
            lambda d: d.index_copy_(0, index[1:], src[1:]),
        ),
        (
            lambda d: tmakit.index_reduce_(d, index, src, "amin"),
            lambda d: d.index_reduce_(0, index, src, "amin"),
        ),
        (
            lambda d: tmakit.index_reduce_(d, index, src, reduce="prod", include_self=False),
            lambda d: d.index_reduce_(0, index, src, "prod", include_self=False),
        ),
        (
            lambda d: tmakit.index_reduce_(d, index, src=src, reduce="mean"),
            lambda d: d.index_reduce_(0, index, src, "mean"),
        ),
    ):
        dst = x.clone()
        assert call(dst) is dst and torch.equal(dst, torch_call(x.clone()))


BAD_ROWS_CALLS = {
    "a dim past the table's": (
        lambda x, o: tmakit.index_add_(x, 3, torch.tensor([0]), o),
        r"index_add_ dim=3 of a table of shape \(4, 5, 6\): its dims are -3 to 2; pass one of those",
    ),
    "a dim before the table's first": (
        lambda x, o: tmakit.gather_rows(x, -4, torch.tensor([0])),
        r"dim=-4 .* its dims are -3 to 2",
    ),
    "a float dim": (
        lambda x, o: tmakit.scatter_rows_(x, 1.0, torch.tensor([0]), o),
        r"scatter_rows_'s dim is 1.0 \(float\); it takes an int dim or, in its place, the index tensor",
    ),
    "a bool dim": (
        lambda x, o: tmakit.index_add_(x, True, torch.tensor([0]), o),
        r"index_add_'s dim is True \(bool\)",
    ),
    "no src": (
        lambda x, o: tmakit.index_add_(x, 0, torch.tensor([0])),
        r"index_add_ got no src: index_add_\(dst",
    ),
    "no reduce": (
        lambda x, o: tmakit.index_reduce_(x, 1, torch.tensor([0]), o),
        r"index_reduce_ got no reduce: index_reduce_\(dst, dim, index, src, reduce\) or",
    ),
    "no index": (lambda x, o: tmakit.gather_rows(x), r"gather_rows got no index"),
    "out given twice": (
        lambda x, o: tmakit.gather_rows(x, torch.tensor([0]), o, out=o),
        r"got the index and 2 arguments after it, one more than it takes",
    ),
    "src of another rank along a dim": (
        lambda x, o: tmakit.index_add_(x, 1, torch.tensor([0]), o[0]),
        r"index_add_ along dim 1: src is \(1, 6\) and the table \(4, 5, 6\); src takes the table's "
        r"shape with len\(index\) along dim 1: \(4, 1, 6\)",
    ),
    "an entry out of range along a dim": (
        lambda x, o: tmakit.index_add_(x, 1, torch.tensor([0, 5]), pos(4, 2, 6)),
        r"index\[1\] is 5; the table has 5 rows, so every entry must be in \[0, 5\)",
    ),
    "a float index along a dim": (
        lambda x, o: tmakit.gather_rows(x, 2, torch.tensor([0.0])),
        r"index is torch.float32; gather_rows takes an int32 or int64 index",
    ),
}


@pytest.mark.parametrize("case", BAD_ROWS_CALLS)
def test_a_bad_rows_argument_is_refused_before_anything_is_written(case):
    call, message = BAD_ROWS_CALLS[case]
    x = pos(*TABLE)
    compact = pos(5, 1, 6, salt=1).expand(5, 1, 6).clone()
    before = x.clone()
    with pytest.raises(TmaConfigError, match=message):
        call(x, compact)
    assert torch.equal(x, before)


def test_the_rows_functions_document_both_orders():
    for name in ("gather_rows", "scatter_rows_", "index_add_", "index_reduce_"):
        doc = getattr(tmakit, name).__doc__
        assert "Torch's order" in doc and "tmakit's" in doc, name


# -- add_'s alpha --------------------------------------------------------------------------------
@pytest.mark.parametrize("alpha", [1, 1.0, 2, -3, 0.5, 0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_add_with_alpha_is_torchs_add(alpha, dtype):
    x, y = pos(6, 8, dtype=dtype), pos(6, 8, salt=1, dtype=dtype)
    dst = x.clone()
    if dtype == torch.int32 and isinstance(alpha, float):  # torch's add_ refuses it, 1.0 included
        with pytest.raises(RuntimeError, match="alpha must not be a floating point number"):
            x.clone().add_(y, alpha=alpha)
        with pytest.raises(TmaConfigError, match="alpha must not be a floating point number"):
            tmakit.add_(dst, y, alpha=alpha)
        assert torch.equal(dst, x)
        return
    want = x.clone().add_(y, alpha=alpha)
    assert tmakit.add_(dst, y, alpha=alpha) is dst and torch.equal(dst, want)


def test_add_with_alpha_takes_the_options_and_refuses_what_it_must():
    x, y = pos(6, 8), pos(6, 8, salt=1)
    dst = x.clone()
    tmakit.add_(dst, y, tile=(16, 64), stages=2, alpha=2)  # options checked, torch's add_ serves it
    assert torch.equal(dst, x + 2 * y)
    refusals = {
        "a string": (
            lambda d: tmakit.add_(d, y, alpha="2"),
            r"add_'s alpha is '2' \(str\); it takes a number",
        ),
        "a bool": (lambda d: tmakit.add_(d, y, alpha=True), r"add_'s alpha is True \(bool\)"),
        "strict": (
            lambda d: tmakit.add_(d, y, alpha=2, strict=True),
            r"reduce_into_ add with strict=True: .*alpha=2: TMA's adds take src as it is",
        ),
        "a kernel": (
            lambda d: tmakit.add_(d, y, alpha=2, reduce_by="ring"),
            r"add_ with reduce_by='ring' and alpha=2: .* leave reduce_by out",
        ),
        "an option": (lambda d: tmakit.add_(d, y, alpha=2, bulk=True), r"as_rows and bulk"),
        "a fraction for integers": (
            lambda d: tmakit.add_(d.int(), y.int(), alpha=0.5),
            r"runs torch's dst.add_\(src\) here \(alpha=0.5: .*\), and torch refused",
        ),
    }
    for name, (call, message) in refusals.items():
        dst = x.clone()
        with pytest.raises(TmaConfigError, match=message):
            call(dst)
        assert torch.equal(dst, x), name


def test_the_reduce_op_takes_alpha_for_add_alone():
    x, y = pos(6, 8), pos(6, 8, salt=1)
    dst = x.clone()
    OPS.reduce_into_(dst, y, "add", alpha=3, strict=False)
    assert torch.equal(dst, x + 3 * y)
    with pytest.raises(TmaConfigError, match=r"op='max' with alpha=3: alpha is add_'s"):
        OPS.reduce_into_(dst, y, "max", alpha=3, strict=False)


# -- copy_'s non_blocking ------------------------------------------------------------------------
@pytest.mark.parametrize("non_blocking", [False, True])
def test_copy_takes_non_blocking(non_blocking):
    """One device: the copy as without it (what torch's copy_ does too); two devices are the GPU
    tests'."""
    src = pos(8, 6, salt=1).t()
    dst = torch.zeros(6, 8)
    assert tmakit.copy_(dst, src, non_blocking=non_blocking) is dst and torch.equal(dst, src)
    dst = torch.zeros(6, 8)
    tmakit.copy_(dst, src, tile=(16, 64), non_blocking=non_blocking)
    assert torch.equal(dst, src)
    dst = torch.zeros(6, 8)
    OPS.copy_(dst, src, non_blocking=non_blocking, strict=False)
    assert torch.equal(dst, src)


def test_copy_refuses_a_non_blocking_that_is_no_bool_and_a_strict_call_torch_serves():
    dst, src = torch.zeros(6, 8), pos(6, 8)
    with pytest.raises(
        TmaConfigError, match=r"copy_'s non_blocking is 'yes' \(str\); it must be True or False"
    ):
        tmakit.copy_(dst, src, non_blocking="yes")
    with pytest.raises(TmaConfigError, match="dst is on cpu; TMA loads from GPU memory"):
        tmakit.copy_(dst, src, non_blocking=True, strict=True)
    with pytest.raises(TmaConfigError, match="unknown copy option"):
        tmakit.copy_(dst, src, non_blocking=True, stage=2)
    assert not dst.any()


# -- copy_many_ returns what torch's _foreach_copy_ returns ---------------------------------------
@pytest.mark.parametrize("kind", [list, tuple])
def test_copy_many_returns_the_destinations_as_foreach_copy_does(kind):
    srcs = kind([pos(3, 4, salt=1), pos(5, salt=2)])
    dsts, torch_dsts = kind([torch.zeros(3, 4), torch.zeros(5)]), kind([torch.zeros(3, 4), torch.zeros(5)])
    returned = torch._foreach_copy_(torch_dsts, srcs)
    assert returned is torch_dsts  # torch's: its first argument itself
    assert tmakit.copy_many_(dsts, srcs) is dsts
    assert all(torch.equal(d, t) for d, t in zip(dsts, torch_dsts, strict=True))


# -- the ops' schemas carry the functions' options ------------------------------------------------
def test_the_ops_schemas_carry_the_functions_options():
    schemas = {
        "copy_": "bool non_blocking=False, bool strict=True",
        "reduce_into_": "Scalar alpha=1, bool strict=True",
        "gather_rows": "bool check_index=True, int? sms=None, bool strict=True",
        "gather_rows.out": "Tensor(a!) out, bool check_index=True, int? sms=None, bool strict=True",
        "scatter_rows_": "bool check_index=True, int? sms=None, bool strict=True",
        "index_add_": "Scalar alpha=1, bool check_index=True, int? sms=None, bool strict=True",
        "index_reduce_": "bool include_self=True, bool check_index=True, int? sms=None, bool strict=True",
        "copy_many_": "bool grouped=True, int? sms=None, bool strict=True",
        "pack.out": "Tensor(a!) out, bool grouped=True, int? sms=None, bool strict=True",
        "unpack_": "bool grouped=True, int? sms=None, bool strict=True",
        "im2col.out": "Tensor(a!) out, str? im2col_by=None, int? sms=None, bool strict=True",
    }
    for name, options in schemas.items():
        op, _, overload = name.partition(".")
        schema = str(getattr(getattr(OPS, op), overload or "default")._schema)
        assert f"*, {options}) ->" in schema, schema


# -- traced ----------------------------------------------------------------------------------------
TRACED = {
    "gather along 1": (lambda x, i: tmakit.gather_rows(x, 1, i) * 1, lambda: (pos(*TABLE), index_along(1))),
    "gather along -1 into out": (
        lambda x, i, o: tmakit.gather_rows(x, -1, i, out=o) * 1,
        lambda: (pos(*TABLE), index_along(2), torch.zeros(4, 5, 4)),
    ),
    "scatter along 2": (
        lambda d, i, s: tmakit.scatter_rows_(d, 2, i, s) * 1,
        lambda: (pos(*TABLE), index_along(2, repeated=False), compact_along(2)),
    ),
    "index_add along 1": (
        lambda d, i, s: tmakit.index_add_(d, 1, i, s, alpha=2) * 1,
        lambda: (pos(*TABLE), index_along(1), compact_along(1)),
    ),
    "index_reduce along -2": (
        lambda d, i, s: tmakit.index_reduce_(d, -2, i, s, "amax", include_self=False) * 1,
        lambda: (pos(*TABLE), index_along(1), compact_along(1)),
    ),
    "add_ alpha": (lambda d, s: tmakit.add_(d, s, alpha=-2) * 1, lambda: (pos(6, 8), pos(6, 8, salt=1))),
    "copy_ non_blocking": (
        lambda d, s: tmakit.copy_(d, s, non_blocking=True) * 1,
        lambda: (torch.zeros(6, 8), pos(8, 6, salt=1).t()),
    ),
    "copy_many_ returned": (
        lambda a, b, c: tmakit.copy_many_([a, b], [c, c * 2])[1] * 1,
        lambda: (torch.zeros(3, 4), torch.zeros(3, 4), pos(3, 4, salt=1)),
    ),
}


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("name", TRACED)
def test_the_torch_signatures_compile_whole(name, backend):
    torch._dynamo.reset()
    counters.clear()
    call, make = TRACED[name]
    eager_inputs, traced_inputs = make(), make()
    want = call(*eager_inputs)
    got = torch.compile(call, fullgraph=True, backend=backend)(*traced_inputs)
    assert dict(counters["graph_break"]) == {}
    assert torch.equal(got, want)
    assert all(torch.equal(a, b) for a, b in zip(eager_inputs, traced_inputs, strict=True))
    torch._dynamo.reset()
