"""Rows by index on the device (`tmakit.gather_rows`, `scatter_rows_`, `index_add_`,
`index_reduce_` through bulk row copies): random cases exact against torch's ops, signed min/max
bit for bit, repeated entries each reduced once, out-of-range entries refused or skipped with the
tensors' neighbours untouched, and torch's OpInfo samples."""

from __future__ import annotations

import random

import pytest

import tmakit
from tmakit import TmaConfigError
from tmakit.check.reference import index_add_wrong_rows

pytestmark = pytest.mark.gpu

POISON = 0x5A

DTYPES = ("float32", "float16", "bfloat16", "int32", "int64", "uint8", "float64", "complex64", "bool")
# (op, the torch dtypes the bulk reduce takes it for)
REDUCE_DTYPES = {
    "add": ("float32", "float16", "bfloat16", "int32", "int64"),
    "amax": ("int32", "int64"),
    "amin": ("int32", "int64"),
}


def positional(shape, dtype, seed, signed=True):
    """Values that depend on position and seed, small enough for exact float sums."""
    import torch

    count = 1
    for extent in shape:
        count *= extent
    base = torch.arange(count, device="cuda", dtype=torch.int64) * 2654435761 + seed * 97
    values = (base % 7) - (3 if signed else 0)
    if dtype == torch.bool:
        return (values > 0).reshape(shape)
    if dtype.is_complex:
        return torch.complex(values.float(), (values * 3 % 5).float()).reshape(shape).to(dtype)
    return values.to(dtype).reshape(shape)


def index_of(pattern, count, rows, rng):
    import torch

    if pattern == "equal":
        values = [rng.randrange(rows)] * count
    elif pattern == "sorted":
        values = sorted(rng.randrange(rows) for _ in range(count))
    elif pattern == "permutation":
        values = rng.sample(range(rows), min(count, rows))
    else:
        values = [rng.randrange(rows) for _ in range(count)]
    return torch.tensor(values, device="cuda")


def check_case(op, dtype_name, row_shape, rows, count, pattern, index_dtype, rng, seed):
    import torch

    dtype = getattr(torch, dtype_name)
    index = index_of(pattern, count, rows, rng).to(getattr(torch, index_dtype))
    count = index.numel()
    table = positional((rows, *row_shape), dtype, seed)
    compact = positional((count, *row_shape), dtype, seed + 1)
    where = f"{op} {dtype_name} rows {row_shape} x {rows}, {count} entries {pattern}"
    if op == "gather":
        row_bytes = table[0].numel() * table.element_size()
        memory = torch.full((count * row_bytes,), POISON, dtype=torch.uint8, device="cuda")
        out = memory.view(dtype).reshape(count, *row_shape)
        tmakit.gather_rows(table, index, out, strict=True)
        expected = table.index_select(0, index)
        assert torch.equal(out, expected), f"{where}: first wrong row {first_wrong(out, expected)}"
        return
    result = table.clone()
    expected = table.clone()
    if op == "scatter":
        if pattern != "permutation":
            return  # repeated entries leave which row lands undefined, in torch too
        tmakit.scatter_rows_(result, index, compact, strict=True)
        expected.index_copy_(0, index, compact)
    elif op == "add":
        tmakit.index_add_(result, index, compact, strict=True)
        expected.index_add_(0, index, compact)
    else:
        tmakit.index_reduce_(result, index, compact, op, strict=True)
        expected.index_reduce_(0, index, compact, op)
    if op == "add" and dtype.is_floating_point:
        wrong = index_add_wrong_rows(result, table, index, compact)
        assert not wrong.numel(), f"{where}: row {int(wrong[0])} beyond the summation-order bound"
    else:
        assert torch.equal(result, expected), f"{where}: first wrong row {first_wrong(result, expected)}"


def first_wrong(got, expected):
    rows = (got != expected).reshape(got.shape[0], -1).any(dim=1).nonzero()
    return int(rows[0, 0]) if rows.numel() else None


def test_three_hundred_random_cases_match_torch():
    rng = random.Random(35)
    cases = 0
    while cases < 300:
        op = rng.choice(("gather", "scatter", "add", "amax", "amin"))
        dtypes = DTYPES if op in ("gather", "scatter") else REDUCE_DTYPES[op]
        dtype_name = rng.choice(dtypes)
        import torch

        nbytes = torch.empty(0, dtype=getattr(torch, dtype_name)).element_size()
        row_bytes = rng.choice((16, 48, 512, 2064, 16384))  # each size a compile per op and dtype
        if row_bytes % nbytes:
            continue
        elements = row_bytes // nbytes
        row_shape = rng.choice(((elements,), (elements // 2, 2) if elements % 2 == 0 else (elements,)))
        rows = rng.choice((1, 7, 130, 1000))
        count = rng.choice((1, 5, 33, 200, 1500))
        pattern = rng.choice(("random", "sorted", "equal", "permutation"))
        index_dtype = rng.choice(("int32", "int64")) if op == "gather" else "int64"
        check_case(op, dtype_name, row_shape, rows, count, pattern, index_dtype, rng, cases)
        cases += 1


@pytest.mark.parametrize("dtype_name", ["int32", "int64"])
@pytest.mark.parametrize("reduce", ["amax", "amin"])
def test_signed_min_max_bit_for_bit(dtype_name, reduce):
    """Signed min/max compare signed: -1 is below 0 (an unsigned compare would make it the max)."""
    import torch

    dtype = getattr(torch, dtype_name)
    info = torch.iinfo(dtype)
    rows, count, width = 64, 4096, 128
    generator = torch.Generator(device="cuda").manual_seed(5)
    table = torch.randint(-5, 5, (rows, width), device="cuda", generator=generator).to(dtype)
    src = torch.randint(
        info.min, info.max, (count, width), device="cuda", dtype=torch.int64, generator=generator
    )
    src = src.to(dtype)
    src[::7] = -1
    src[::11] = info.min
    index = torch.randint(0, rows, (count,), device="cuda", generator=generator)
    got = tmakit.index_reduce_(table.clone(), index, src, reduce, strict=True)
    expected = table.clone().index_reduce_(0, index, src, reduce)
    assert torch.equal(got, expected)


def test_repeated_entries_each_add_exactly_once():
    """A million int32 adds into one row: the bulk reduce's per-element adds are atomic."""
    import torch

    count, width = 1 << 14, 64
    dst = torch.zeros(4, width, dtype=torch.int32, device="cuda")
    index = torch.full((count,), 2, device="cuda")
    src = torch.arange(count * width, device="cuda", dtype=torch.int32).reshape(count, width) % 1000
    tmakit.index_add_(dst, index, src, strict=True)
    assert torch.equal(dst[2], src.sum(0, dtype=torch.int32)) and not dst[[0, 1, 3]].any()


@pytest.mark.parametrize("op", ["gather", "scatter", "add"])
def test_an_entry_out_of_range_is_refused_or_moves_nothing(op):
    """Checked: TmaConfigError naming the entry, nothing written. Unchecked: the kernel skips it,
    and the memory around the tensors (poisoned) is left as it was."""
    import torch

    rows, width, count = 400, 128, 300  # 512-byte rows, 64 a stage: five steps
    memory = torch.full((rows + 20, width), POISON, dtype=torch.int32, device="cuda")
    table = memory[10 : 10 + rows]
    table.copy_(positional((rows, width), torch.int32, 3))
    before = memory.clone()
    index = torch.arange(count, device="cuda")
    index[5], index[40], index[250] = rows, -1, rows + 7
    compact_memory = torch.full((count + 2, width), POISON, dtype=torch.int32, device="cuda")
    compact = compact_memory[1 : 1 + count]
    if op != "gather":
        compact.copy_(positional((count, width), torch.int32, 4))
    call = {
        "gather": lambda **kw: tmakit.gather_rows(table, index, compact, strict=True, **kw),
        "scatter": lambda **kw: tmakit.scatter_rows_(table, index, compact, strict=True, **kw),
        "add": lambda **kw: tmakit.index_add_(table, index, compact, strict=True, **kw),
    }[op]
    compact_before = compact_memory.clone()
    with pytest.raises(TmaConfigError, match=r"index\[5\] is 400; the table has 400 rows"):
        call()
    assert torch.equal(memory, before) and torch.equal(compact_memory, compact_before)
    call(check_index=False)
    torch.cuda.synchronize()
    assert torch.equal(memory[:10], before[:10]) and torch.equal(memory[10 + rows :], before[10 + rows :])
    assert torch.equal(compact_memory[[0, -1]], compact_before[[0, -1]])
    valid = torch.ones(count, dtype=torch.bool, device="cuda")
    valid[[5, 40, 250]] = False
    if op == "gather":
        assert torch.equal(compact[valid], table[index[valid]])
        assert (compact[~valid] == POISON).all()  # the poison `torch.full` wrote
    else:
        expected = before[10 : 10 + rows].clone()
        if op == "scatter":
            expected.index_copy_(0, index[valid], compact[valid])
        else:
            expected.index_add_(0, index[valid], compact[valid])
        assert torch.equal(table, expected)


def test_what_bulk_copies_cannot_serve_takes_torchs_op():
    import torch

    src = torch.arange(300, device="cuda", dtype=torch.float32).reshape(100, 3)  # 12-byte rows
    index = torch.tensor([4, 2, 99], device="cuda")
    assert tmakit.rows_path("gather", src, index, torch.empty(3, 3, device="cuda")).path == "torch"
    assert torch.equal(tmakit.gather_rows(src, index), src[index])
    with pytest.raises(TmaConfigError, match="a bulk copy moves a multiple of 16"):
        tmakit.gather_rows(src, index, strict=True)
    table, twice = torch.zeros(10, 64, device="cuda"), torch.tensor([1, 1], device="cuda")
    ones = torch.ones(2, 64, device="cuda")
    assert "drop NaNs" in tmakit.rows_path("max", table, twice, ones).reason  # float max: torch's
    tmakit.index_reduce_(table, twice, ones, "amax")
    assert torch.equal(table[1], torch.ones(64, device="cuda"))


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_torchs_order_along_any_dim_matches_torchs_ops(dim):
    """`gather_rows(src, dim, index)` ... in torch's order: along dim 0 the bulk copies where they
    serve, along another the view with that dim first (torch's op, its rows not one run); every
    element equals torch's `index_select`, `index_copy_`, `index_add_` and `index_reduce_`."""
    import torch

    table = positional((24, 20, 16), torch.int32, seed=dim + 7)
    rows = table.shape[dim]
    index = torch.tensor([rows - 1, 0, 3, rows - 1, 1], device="cuda")
    unique = torch.tensor([rows - 1, 0, 3, 1], device="cuda")
    shape = list(table.shape)
    shape[dim] = 5
    src = positional(tuple(shape), torch.int32, seed=dim + 11)
    want = torch.index_select(table, dim, index)
    got = tmakit.gather_rows(table, dim, index)
    assert torch.equal(got, want) and got.stride() == want.stride()
    shape[dim] = 4
    dst, copied = table.clone(), positional(tuple(shape), torch.int32, seed=dim + 13)
    tmakit.scatter_rows_(dst, dim, unique, copied)
    assert torch.equal(dst, table.clone().index_copy_(dim, unique, copied))
    dst = table.clone()
    tmakit.index_add_(dst, dim, index, src, alpha=3)
    assert torch.equal(dst, table.clone().index_add_(dim, index, src, alpha=3))
    dst = table.clone()
    tmakit.index_reduce_(dst, dim, index, src, "amax")
    assert torch.equal(dst, table.clone().index_reduce_(dim, index, src, "amax"))


def test_rows_inside_a_cuda_graph_replay():
    import torch

    table = positional((1000, 256), torch.float16, 1)
    index = torch.randint(0, 1000, (4096,), device="cuda")
    out = torch.empty(4096, 256, dtype=torch.float16, device="cuda")
    tmakit.gather_rows(table, index, out, strict=True)  # compiled outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        tmakit.gather_rows(table, index, out, strict=True)
    index.copy_(torch.randint(0, 1000, (4096,), device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, table[index])


def test_a_repeated_call_is_checked_as_the_first():
    """A call like one served before skips its planning, not its checks: the index's entries,
    shared memory, and an index or tensor of another kind take the full path."""
    import torch

    table = positional((1000, 256), torch.float32, 2)
    index = torch.randint(0, 1000, (64,), device="cuda")
    out = torch.empty(64, 256, device="cuda")
    for _ in range(2):
        assert torch.equal(tmakit.gather_rows(table, index, out), table[index])
    with pytest.raises(TmaConfigError, match="share memory"):
        tmakit.gather_rows(table, index, table[10:74])
    bad = index.clone()
    bad[7] = 1000
    with pytest.raises(TmaConfigError, match=r"index\[7\] is 1000"):
        tmakit.gather_rows(table, bad, out)
    with pytest.raises(TmaConfigError, match="index is torch.float32"):
        tmakit.gather_rows(table, index.float(), out)
    as_ints = torch.empty(64, 256, dtype=torch.int32, device="cuda")  # the same key but its dtype
    with pytest.raises(TmaConfigError, match="out is torch.int32 and the table torch.float32"):
        tmakit.gather_rows(table, index, as_ints)
    strided = torch.randint(0, 1000, (128,), device="cuda")[::2]  # an index of stride 2
    assert torch.equal(tmakit.gather_rows(table, strided, out), table[strided])
    dst = torch.zeros(1000, 256, dtype=torch.int32, device="cuda")
    ones = torch.ones(64, 256, dtype=torch.int32, device="cuda")
    for _ in range(2):
        tmakit.index_reduce_(dst, index, ones, "amax")
    assert torch.equal(dst, torch.zeros_like(dst).index_reduce_(0, index, ones, "amax"))


@pytest.mark.parametrize("row_kib", [64, 128])
def test_long_rows_on_shallow_rings_and_a_strided_table(row_kib):
    """Rows of 64 KiB (3 stages) and 128 KiB (1 stage: each store read before its stage is
    freed), from every other row of a table (rows twice their length apart)."""
    import torch

    width = row_kib * 256  # int32 elements
    memory = positional((60, width * 2), torch.int32, 9)
    table = memory[:, :width]  # rows 2 x row_kib KiB apart
    index = torch.randint(0, 60, (300,), device="cuda")
    got = tmakit.gather_rows(table, index, strict=True)
    assert torch.equal(got, table[index])
    dst = torch.zeros(60, width, dtype=torch.int32, device="cuda")
    tmakit.index_add_(dst, index, got, strict=True)
    assert torch.equal(dst, torch.zeros_like(dst).index_add_(0, index, got))


def test_the_ops_are_strict_where_the_functions_take_torchs_op():
    """An fp64 table has no bulk reduce: `tmakit.index_add_` takes torch's op, the op refuses
    (every op is strict), writing nothing; an int32 index is taken on torch's path."""
    import torch

    import tmakit.ops  # noqa: F401  registers the ops

    table = torch.zeros(10, 4, dtype=torch.float64, device="cuda")
    index = torch.tensor([3, 1, 3], device="cuda", dtype=torch.int32)
    rows = torch.ones(3, 4, dtype=torch.float64, device="cuda")
    with pytest.raises(TmaConfigError, match="bulk row copies cannot serve"):
        torch.ops.tmakit.index_add_(table, index, rows)
    torch.cuda.synchronize()
    assert not table.any()
    tmakit.index_add_(table, index, rows)
    want = torch.zeros_like(table).index_add_(0, index.long(), rows)
    assert torch.equal(table, want)
    tmakit.scatter_rows_(table, index[:2], rows[:2] * 5)
    assert torch.equal(table[[3, 1]], rows[:2] * 5)
