"""Many tensors, one launch, on the CPU: pack offsets, the chunk table (replayed on a NumPy memory
against each pair's bytes), the plan's checks, and the sm_90a compile of the grouped copy."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

from tmakit import TmaConfigError
from tmakit.limits import SMEM_PER_BLOCK
from tmakit.many.plan import PACK_ALIGN, ManyPlan, pack_offsets


def test_pack_offsets_are_aligned_in_order():
    offsets, total = pack_offsets([10, 0, 16, 33, 1])
    assert offsets == [0, 16, 16, 32, 80] and total == 81
    assert all(offset % PACK_ALIGN == 0 for offset in offsets)


@pytest.mark.parametrize("stage_bytes", [1024, 4096])
def test_the_chunk_table_copies_every_byte_once(stage_bytes):
    """Replayed on one byte array as the kernel runs it: per step, each chunk's 16-byte multiple
    into a stage at its offset (the stage written once per byte, nothing past its end), then out
    to its destination, the tail global to global; the destinations end up as the sources and
    nothing else changes."""
    rng = np.random.default_rng(34)
    plan = ManyPlan(stage_bytes=stage_bytes)
    sizes = [int(s) for s in rng.integers(0, 5000, size=40)] + [0, 1, 15, 16, 1024, 1025, 3]
    sizes += [int(s) for s in rng.integers(0, 40, size=60)]  # many to a stage
    src_offsets, total = pack_offsets(sizes)
    dst_offsets = [total + 64 + offset for offset in src_offsets]
    memory = rng.integers(0, 256, size=2 * total + 128, dtype=np.uint8)
    expected = memory.copy()
    for size, s, d in zip(sizes, src_offsets, dst_offsets, strict=True):
        expected[d : d + size] = memory[s : s + size]
    chunks, starts = plan.chunk_table(src_offsets, dst_offsets, sizes)
    steps, count = plan.counts(sizes)
    bulk_bytes = sum(size & ~15 for size in sizes)
    assert (steps, count) == (len(starts) - 1, len(chunks)) and steps >= -(-bulk_bytes // stage_bytes)
    assert starts[0] == 0 and starts[-1] == len(chunks) and (np.diff(starts) > 0).all()
    fills = []
    for step in range(steps):
        stage, written = np.zeros(stage_bytes, dtype=np.uint8), np.zeros(stage_bytes, dtype=int)
        rows = chunks[starts[step] : starts[step + 1]]
        for source, _, nbytes, offset in rows:  # the producer's lanes
            bulk = nbytes & ~15
            assert offset % 16 == 0 and source % 16 == 0 and offset + bulk <= stage_bytes
            stage[offset : offset + bulk] = memory[source : source + bulk]
            written[offset : offset + bulk] += 1
        assert written.max(initial=0) <= 1 and len(rows) <= 32  # a chunk a lane
        fills.append(written.sum())
        for source, target, nbytes, offset in rows:  # the consumer's lanes
            bulk = nbytes & ~15
            memory[target : target + bulk] = stage[offset : offset + bulk]
            memory[target + bulk : target + nbytes] = memory[source + bulk : source + nbytes]
    assert np.array_equal(memory, expected)
    assert max(fills) == stage_bytes  # small tensors share a stage, a large one fills it


@pytest.mark.parametrize("size", [1, 16, 48, 1024])
def test_a_stage_holds_at_most_a_warps_chunks(size):
    """Tiny tensors spread over steps (each takes at least a 31st of a stage of the stream), so
    no lane loops over many chunks and every block gets steps."""
    plan = ManyPlan()
    chunks, starts = plan.chunk_table([0] * 3000, [0] * 3000, [size] * 3000)
    per_step = np.diff(starts)
    assert per_step.max() <= 32 and len(per_step) == plan.counts([size] * 3000)[0] >= 3000 // 32
    assert (chunks[:, 3] + (chunks[:, 2] & ~15) <= plan.stage_bytes).all()
    assert (chunks[:, 3] < plan.stage_bytes).all()


def test_a_table_of_tails_only_and_of_nothing():
    plan = ManyPlan(stage_bytes=1024)
    chunks, starts = plan.chunk_table([0, 16], [64, 80], [3, 15])
    assert chunks.tolist() == [[0, 64, 3, 0], [16, 80, 15, 48]] and starts.tolist() == [0, 2]
    chunks, starts = plan.chunk_table([0, 1024], [4096, 5120], [1024, 3])  # a tail after a full stage
    assert chunks.tolist() == [[0, 4096, 1024, 0], [1024, 5120, 3, 0]] and starts.tolist() == [0, 1, 2]
    chunks, starts = plan.chunk_table([0, 16], [64, 80], [0, 0])
    assert len(chunks) == 0 and starts.tolist() == [0]
    assert plan.counts([]) == (0, 0)


@pytest.mark.parametrize(
    ("kwargs", "rule"),
    [
        ({"stage_bytes": 1000}, "whole number of KiB"),
        ({"stages": 8}, "do not fit .* 7 fit"),
        ({"stages": 0}, "at least"),
        ({"sm_count": 2**31}, "sm_count 2147483648: .* 32-bit"),
        ({"stage_bytes": 0}, "whole number of KiB"),
    ],
)
def test_plans_that_cannot_run_are_refused(kwargs, rule):
    with pytest.raises(TmaConfigError, match=rule):
        ManyPlan(**kwargs)


def test_the_shared_memory_is_the_kernels_ring():
    for stages in range(1, 8):
        plan = ManyPlan(stages=stages)
        assert plan.smem_bytes == plan.pipeline.smem_bytes <= SMEM_PER_BLOCK


@pytest.mark.parametrize("relative", ["both", "src", 1])
def test_a_side_the_grouped_copy_has_not_is_refused_before_compiling(relative):
    pytest.importorskip("cutlass")
    from tmakit.many.launch import compile_many

    with pytest.raises(TmaConfigError, match="relative side .* is not one of None, source, destination"):
        compile_many(ManyPlan(), relative)


def test_the_grouped_copy_compiles_for_sm90a():
    pytest.importorskip("cutlass")
    from tmakit.many.launch import compile_many

    ptx = compile_many(ManyPlan(), keep_ptx=True).ptx
    assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in ptx
    assert "cp.async.bulk.global.shared::cta.bulk_group" in ptx
    assert re.search(r"st\.global\.b8", ptx)  # the tails, a byte a lane


@pytest.fixture
def many_ops_on_cpu(monkeypatch):
    """The many-tensor ops exercised end to end on a CPU: their device check waived, and each
    strict API call they make served by the function's own path for CPU tensors (torch's
    `_foreach_copy_`, which does what the kernel does)."""
    pytest.importorskip("torch")
    from stand_ins import strictly
    from tmakit.many import api as api_many
    from tmakit.many import op as ops_many

    monkeypatch.setattr(ops_many, "check_traced", lambda op, **tensors: None)
    served_api = {name: strictly(getattr(api_many, name)) for name in ("copy_many_", "pack", "unpack_")}
    monkeypatch.setattr(ops_many, "api_many", SimpleNamespace(**served_api))


def test_the_ops_refuse_cpu_tensors_and_strict_refuses_what_tma_does_not_serve():
    """Every op is strict: CPU tensors get TmaConfigError, eagerly and while tracing; the
    functions' strict=True refuses a pair no TMA path serves, before anything is copied."""
    torch = pytest.importorskip("torch")
    import tmakit
    import tmakit.ops  # noqa: F401  registers the ops

    dsts, srcs = [torch.zeros(3), torch.zeros(2)], [torch.ones(3), torch.ones(2)]
    with pytest.raises(TmaConfigError, match="called eagerly: dsts.0. is on cpu"):
        torch.ops.tmakit.copy_many_(dsts, srcs)
    with pytest.raises(TmaConfigError, match="called eagerly: tensors.0. is on cpu"):
        torch.ops.tmakit.pack(srcs)
    with pytest.raises(TmaConfigError, match="called eagerly: flat is on cpu"):
        torch.ops.tmakit.unpack_(torch.zeros(8), dsts)
    with pytest.raises(TmaConfigError, match="strict=True: dsts.0. <- srcs.0. has no TMA path"):
        tmakit.copy_many_(dsts, srcs, strict=True)
    with pytest.raises(TmaConfigError, match="strict=True and grouped=False"):
        tmakit.copy_many_(dsts, srcs, strict=True, grouped=False)
    assert not any(d.any() for d in dsts)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), pytest.raises(TmaConfigError, match="while tracing.*tensors.0. is on cpu"):
        torch.ops.tmakit.pack([torch.empty(3)])


def test_the_api_and_ops_on_cpu_tensors_match_torch(many_ops_on_cpu):
    """CPU tensors take torch's `_foreach_copy_`; pack lays them at aligned offsets; the ops
    trace with their fakes and pass opcheck."""
    torch = pytest.importorskip("torch")
    import tmakit
    import tmakit.ops  # noqa: F401  registers the ops

    tensors = [torch.randn(3, 5), torch.arange(7.0), torch.zeros(0), torch.randn(4, 4).t()]
    flat, offsets = tmakit.pack(tensors)
    assert offsets == [0, 16, 24, 24] and flat.dtype == torch.float32
    back = [torch.empty_like(t) for t in tensors]
    tmakit.unpack_(flat, back)
    assert all(torch.equal(a, b) for a, b in zip(back, tensors, strict=True))
    mixed, _ = tmakit.pack([torch.ones(3, dtype=torch.int8), torch.ones(2)])
    assert mixed.dtype == torch.uint8 and mixed.numel() == 24
    with pytest.raises(TmaConfigError, match="2 destinations and 1 sources"):
        tmakit.copy_many_([torch.empty(1), torch.empty(1)], [torch.ones(1)])
    with pytest.raises(TmaConfigError, match="for one pair use tmakit.copy_"):
        tmakit.copy_many_(torch.empty(1), torch.ones(1))
    ops = torch.ops.tmakit
    torch.library.opcheck(ops.pack.default, (tensors[:2],))
    torch.library.opcheck(
        ops.copy_many_.default, ([torch.empty(3), torch.empty(2)], [torch.ones(3), torch.ones(2)])
    )
    torch.library.opcheck(ops.unpack_.default, (ops.pack(tensors[:2]), [torch.empty(3, 5), torch.empty(7)]))
    compiled = torch.compile(lambda ts: ops.pack(ts) * 2, backend="aot_eager", fullgraph=True)
    doubled = compiled(tensors[:2])  # the padding between spans is zeros: the same every time
    assert torch.equal(doubled, flat[:23] * 2) and flat[15] == 0


def test_plan_and_explain_describe_a_grouped_copy():
    import contextlib
    import io

    from tmakit import cli

    def run(*args):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = cli.main(list(args))
        return code, out.getvalue()

    code, out = run("plan", "--kernel", "many", "--many", "33554432x4,90177536x3,8192x2")
    assert code == 0 and "tensors           9, 404766720 bytes, 12353 step(s), 12354 chunk(s)" in out
    code, out = run("explain", "--kernel", "many", "--many", "4097,10,40000x3", "--stages", "2")
    assert code == 0 and "grid              4 persistent block(s), 4 step(s), 8 chunk(s)" in out
    assert (
        "stage 0: 3 chunk(s) (tensor 0 bytes 0-4096; tensor 1 bytes 0-9; tensor 2 bytes 0-27599); "
        "2 cp.async.bulk in and out; its full barrier expects 31696 bytes; 2 tail(s)"
    ) in out


@pytest.mark.parametrize(
    ("many", "error"),
    [
        ("1x99999999999", "at most 1000000 tensors"),
        ("99999999999999999999", "at most 1000000 tensors of at most"),
        ("1099511627776x1000000", "chunks, the kernel's count"),
        ("4096x", "give tensor sizes in bytes"),
    ],
)
def test_plan_refuses_groups_the_kernel_cannot_count(many, error, capsys):
    from tmakit import cli

    assert cli.main(["plan", "--kernel", "many", "--many", many]) == 2
    assert error in capsys.readouterr().err


def test_the_ops_refuse_inputs_that_need_a_gradient(many_ops_on_cpu):
    torch = pytest.importorskip("torch")
    import tmakit.ops  # noqa: F401  registers the ops

    with pytest.raises(TmaConfigError, match="not differentiable"):
        torch.ops.tmakit.pack([torch.ones(3, requires_grad=True)])
    with torch.no_grad():
        assert torch.ops.tmakit.pack([torch.ones(3, requires_grad=True)]).shape == (3,)


def test_a_kept_route_holds_no_tensor_and_matches_only_the_same_tensors():
    """A repeated call reuses its route; the route keeps none of the caller's tensors alive, and a
    list with the same addresses but another shape, dtype or stride gets a route of its own, kept
    beside the first."""
    torch = pytest.importorskip("torch")
    import gc
    import weakref

    from tmakit.many import api as many

    many._ROUTES.clear()
    srcs = [torch.arange(12.0).reshape(3, 4), torch.arange(5)]
    dsts = [torch.zeros(3, 4), torch.zeros(5, dtype=torch.int64)]
    tmakit_copy_many(dsts, srcs)
    tmakit_copy_many(dsts, srcs)
    assert many._ROUTES.counts() == [1]
    assert all(torch.equal(d, s) for d, s in zip(dsts, srcs, strict=True))
    reshaped = [dsts[0].view(4, 3), dsts[1]]
    with pytest.raises(TmaConfigError, match="torch.s copy_ refuses"):
        tmakit_copy_many(reshaped, srcs)  # the same addresses, another shape: checked afresh
    transposed = [dsts[0].view(4, 3).t(), dsts[1]]
    srcs[0].add_(1)
    tmakit_copy_many(transposed, [srcs[0], srcs[1]])
    assert torch.equal(transposed[0], srcs[0])
    assert many._ROUTES.counts() == [2]  # each layout its own route; the refused one none
    tmakit_copy_many(dsts, srcs)
    assert torch.equal(dsts[0], srcs[0]) and many._ROUTES.counts() == [2]
    watched = weakref.ref(dsts[0])
    del dsts, reshaped, transposed
    gc.collect()
    assert watched() is None


def tmakit_copy_many(dsts, srcs):
    from tmakit import copy_many_

    copy_many_(dsts, srcs)


def test_a_grouped_copy_prepared_once_copies_each_call_and_refuses_moved_tensors():
    torch = pytest.importorskip("torch")
    from tmakit import GroupedCopy

    srcs = [torch.arange(6.0), torch.arange(4, dtype=torch.int32).reshape(2, 2)]
    dsts = [torch.zeros(6), torch.zeros(2, 2, dtype=torch.int32)]
    prepared = GroupedCopy(dsts, srcs)
    for step in range(3):
        srcs[0].add_(step)
        prepared()
        assert all(torch.equal(d, s) for d, s in zip(dsts, srcs, strict=True))
    dsts[1].set_(torch.zeros(2, 2, dtype=torch.int32))  # its storage swapped
    with pytest.raises(TmaConfigError, match=r"dsts\[1\] moved .* prepare a GroupedCopy"):
        prepared()
    with pytest.raises(TmaConfigError, match="2 destinations and 1 sources"):
        GroupedCopy(dsts, srcs[:1])
    with pytest.raises(TmaConfigError, match="takes a list"):
        GroupedCopy(dsts[0], srcs[0])


def test_prepared_pack_and_unpack_match_the_calls():
    torch = pytest.importorskip("torch")
    import tmakit
    from tmakit import GroupedCopy

    tensors = [torch.arange(5.0), torch.arange(12.0).reshape(3, 4).t(), torch.empty(0)]
    packing = GroupedCopy.packing(tensors)
    packing()
    flat, offsets = tmakit.pack(tensors)
    assert packing.offsets == offsets and torch.equal(packing.flat, flat)
    back = [torch.full_like(t, -1) for t in tensors]
    unpacking = GroupedCopy.unpacking(flat, back)
    unpacking()
    assert all(torch.equal(a, b) for a, b in zip(back, tensors, strict=True)) and unpacking.flat is flat


@pytest.mark.parametrize(
    ("pairs", "disjoint"),
    [
        ([(0, 100, 50), (200, 300, 50)], True),
        ([(0, 100, 50), (0, 200, 50)], True),  # one source read twice
        ([(0, 0, 50), (100, 200, 50)], True),  # a pair onto itself (kept out of the launch)
        ([(0, 100, 50), (120, 300, 50)], False),  # a destination another pair reads
        ([(0, 100, 50), (400, 140, 50)], False),  # two destinations share bytes
        ([(0, 40, 50), (400, 500, 50)], False),  # a pair's destination overlaps its own source
        ([(0, 100, 0), (100, 300, 50)], True),  # an empty pair touches nothing
        ([(0, 100, 50), (150, 300, 50)], True),  # adjacent, not shared
    ],
)
def test_pairs_overlapping_are_found_for_one_launch(pairs, disjoint):
    from tmakit.many.plan import pairs_disjoint

    src, dst, nbytes = zip(*pairs, strict=True)
    assert pairs_disjoint(src, dst, nbytes) is disjoint
    assert pairs_disjoint(src[::-1], dst[::-1], nbytes[::-1]) is disjoint


def test_a_prepared_pack_reads_its_tensors_where_they_are_each_call():
    torch = pytest.importorskip("torch")
    from tmakit import GroupedCopy

    transposed = torch.arange(12.0).reshape(3, 4).t()
    prepared = GroupedCopy.packing([transposed, torch.ones(2)])
    prepared()
    transposed.add_(100)
    prepared()
    assert torch.equal(prepared.flat[:12], transposed.reshape(-1))


def test_a_prepared_copy_routes_afresh_when_autograd_would_record_it():
    """Prepared under no_grad with a destination that requires grad; called with grad mode on,
    it is routed as torch would take it: an in-place copy into a leaf that requires grad is
    refused."""
    torch = pytest.importorskip("torch")
    from tmakit import GroupedCopy

    dst, src = torch.zeros(3, requires_grad=True), torch.arange(3.0)
    with torch.no_grad():
        prepared = GroupedCopy([dst], [src])
        prepared()
    assert torch.equal(dst.detach(), src)
    with pytest.raises(TmaConfigError, match="torch.s copy_ refuses"):
        prepared()
    assert len(prepared._routes) == 1  # the refused route is not kept: refused again next call
    with pytest.raises(TmaConfigError, match="torch.s copy_ refuses"):
        prepared()


def test_an_unchecked_prepared_copy_reads_only_the_grad_mode():
    """check_addresses=False: each call copies as prepared without reading any tensor; grad mode
    turned on still routes afresh when a prepared tensor requires grad."""
    torch = pytest.importorskip("torch")
    from tmakit import GroupedCopy

    dst, src = torch.zeros(3, requires_grad=True), torch.arange(3.0)
    with torch.no_grad():
        prepared = GroupedCopy([dst], [src], check_addresses=False)
        for step in range(3):
            src.add_(step)
            prepared()
            assert torch.equal(dst.detach(), src)
    with pytest.raises(TmaConfigError, match="torch.s copy_ refuses"):
        prepared()  # grad mode on: routed afresh, not the no_grad route, and refused
    assert len(prepared._routes) == 1  # the refused route is not kept
    with pytest.raises(TmaConfigError, match="check_addresses"):
        GroupedCopy([dst], [src], check_addresses="no")


def test_a_prepared_unpack_watches_the_callers_tensors():
    """The pairs are views of the caller's tensors; a tensor whose storage is swapped is refused
    by its name, not written through a stale view."""
    torch = pytest.importorskip("torch")
    from tmakit import GroupedCopy

    tensors = [torch.arange(4.0), torch.arange(6, dtype=torch.int32)]
    flat, _ = tmakit_pack(tensors)
    back = [torch.zeros(4), torch.zeros(6, dtype=torch.int32)]
    prepared = GroupedCopy.unpacking(flat, back)
    prepared()
    assert all(torch.equal(a, b) for a, b in zip(back, tensors, strict=True))
    back[1].set_(torch.zeros(6, dtype=torch.int32))
    with pytest.raises(TmaConfigError, match=r"tensors\[1\] moved"):
        prepared()


def tmakit_pack(tensors):
    from tmakit import pack

    return pack(tensors)


def test_pairs_sharing_bytes_across_paths_copy_in_the_lists_order():
    """A destination written twice, once through a dtype change (torch's path) and once as a
    plain copy, ends as the later pair says, as torch's in-order copies would."""
    torch = pytest.importorskip("torch")
    from tmakit import copy_many_
    from tmakit.many import api as many

    a = torch.zeros(8)
    b, c = torch.full((8,), 1.0, dtype=torch.float64), torch.full((8,), 2.0)
    copy_many_([a, a], [b, c])
    assert torch.equal(a, c)
    route, *_ = many._ROUTES.newest()
    assert route.in_order is not None  # not the paths' own order
    copy_many_([a, a], [c, b])
    assert torch.equal(a, b.float())


def test_a_pair_onto_its_own_bytes_that_rewrites_them_is_ordered_with_its_readers():
    """`x <- x.view(int32)` (or a conjugate, or a negative view) changes x's bytes: a pair reading
    x must not run before it in one launch; the same view onto itself changes nothing."""
    torch = pytest.importorskip("torch")
    from tmakit.many.call import apart
    from tmakit.many.plan import pairs_disjoint

    x, y, z = torch.arange(8.0), torch.zeros(8), torch.zeros(4, dtype=torch.complex64)
    assert not apart([x, y], [x.view(torch.int32), x])
    assert not apart([z, y[:4].view(torch.complex64)], [z.conj(), z.view(torch.complex64)])
    assert apart([x, y], [x, x])  # x onto itself: any order
    assert not pairs_disjoint([0, 0], [0, 100], [32, 32], unchanged=[False, True])
    assert pairs_disjoint([0, 0], [0, 100], [32, 32], unchanged=[True, True])


def test_a_prepared_copy_keeps_each_routes_own_pairs():
    """Unpacking into a tensor that is unfrozen, then frozen again: each autograd state runs with
    the pairs made for it (a frozen tensor's call succeeds as a fresh unpack_ does)."""
    torch = pytest.importorskip("torch")
    from tmakit import GroupedCopy, pack

    p = torch.zeros(4)
    flat, _ = pack([torch.arange(4.0)])
    prepared = GroupedCopy.unpacking(flat, [p])
    prepared()
    p.requires_grad_(True)
    with pytest.raises(TmaConfigError, match="torch.s copy_ refuses"):  # in place into a leaf
        prepared()
    p.requires_grad_(False)
    p.zero_()
    prepared()
    assert torch.equal(p, torch.arange(4.0))


def test_a_kept_packing_is_found_by_addresses_and_refuses_buffers_it_cannot_serve(monkeypatch):
    """`pack` and `unpack_` of a list seen before take its kept table (here on CPU tensors,
    the launch recorded): a new buffer, or a given one of the right dtype, length and place;
    a buffer holding a tensor's bytes, another dtype or too short takes the pairs instead."""
    torch = pytest.importorskip("torch")
    from tmakit import pack, unpack_
    from tmakit.many import kept as many_kept

    launches = []
    monkeypatch.setattr(many_kept, "groupable", lambda dst, src: True)
    monkeypatch.setattr(many_kept, "encode", lambda torch, device, src, dst, nbytes: (src, dst, nbytes))
    monkeypatch.setattr(
        many_kept,
        "launch_table",
        lambda torch, device, table, side, flat, sms: launches.append((table, side)),
    )
    many_kept._KEPT.clear()
    tensors = [torch.arange(12.0), torch.arange(3.0), torch.zeros(0), torch.arange(8.0)]
    flat, offsets = pack(tensors)
    assert offsets == [0, 12, 16, 16] and len(flat) == 24
    (src, dst, nbytes), relative = launches[-1]
    assert relative == "destination" and dst == [0, 48, 64, 64] and nbytes == [48, 12, 0, 32]
    assert src == [t.data_ptr() for t in tensors]
    assert pack(tensors)[1] == offsets and len(launches) == 2 and many_kept._KEPT.counts() == [1]
    out = torch.empty(30)
    assert pack(tensors, out=out)[0] is out and len(launches) == 3
    for wrong in (torch.empty(23), torch.empty(24, dtype=torch.float64), torch.empty(4, 6)):
        with pytest.raises(TmaConfigError, match="compact 1-D"):
            pack(tensors, out=wrong)
    assert len(launches) == 3
    holding = torch.zeros(40)
    inside = [holding[:12], holding[20:23]]
    pack(inside)
    count = len(launches)
    pack(inside, out=holding)  # shares bytes with its tensors: the pairs, in order
    assert len(launches) == count
    unpack_(flat, tensors)
    (src, dst, _), relative = launches[-1]
    assert relative == "source" and src == [0, 48, 64, 64] and dst == [t.data_ptr() for t in tensors]
    reshaped = [tensors[0].view(3, 4), *tensors[1:]]  # the same addresses, another layout
    unpack_(flat, reshaped)
    assert len(many_kept._KEPT.newest()) == 2
    quantized = torch.quantize_per_tensor(torch.ones(4), 0.5, 0, torch.quint8)
    with pytest.raises(TmaConfigError, match="quantized"):
        pack([quantized])  # checked before any table is kept
    one = [torch.full((1,), 3.0)]
    pack(one)
    count = len(launches)
    strided = torch.zeros(64)[::4][:1]  # one element, a stride of 4: compact to torch, not to the kernel
    assert pack(one, out=strided)[0] is strided and strided.item() == 3.0 and len(launches) == count
    many_kept._KEPT.clear()
    lists = [[torch.ones(4)] for _ in range(many_kept._KEPT.most + 1)]
    for listed in lists:
        pack(listed)
        pack(lists[0])  # used every other call: never the one evicted
    assert ("destination", True, (lists[0][0].data_ptr(),)) in many_kept._KEPT
