"""Layout-changing copies on the CPU: the shared-memory transpose's thread map, the plan's
shared-memory accounting and refusals, the compiled PTX, and the on-disk compile cache."""

import re

import pytest

from tmakit import LoadConfig, LoadPlan, TmaConfigError
from tmakit.check.sweep import transpose_configs
from tmakit.config import DTYPES
from tmakit.plan import CopyOptions, CopyPlan, PipelinePlan, copy_class, copy_destination
from tmakit.runtime.launch import compile_copy
from tmakit.validate import SMEM_PER_BLOCK


def transposing(shape, dtype, tile, major="col", warps=4, stages=4):
    config = LoadConfig(shape, dtype, tile, 0, major)
    return CopyPlan(
        PipelinePlan(LoadPlan(config), stages=stages, consumer_warps=warps, persistent=True), True
    )


CASES = [
    ("fp16", (64, 256), "col"),
    ("fp16", (64, 256), "row"),
    ("bf16", (128, 64), "col"),
    ("fp32", (64, 128), "col"),
    ("fp32", (32, 32), "row"),
    ("int8", (128, 256), "col"),
    ("fp8e4m3", (256, 128), "row"),
]


@pytest.mark.parametrize(("dtype", "tile", "major"), CASES)
@pytest.mark.parametrize("warps", [1, 3, 4, 8])
def test_transpose_moves_every_element_once_without_bank_conflicts(dtype, tile, major, warps):
    """Replays the consumer threads' blocks: every (source row, chunk) read once and every
    (staging row, chunk) written once, element (r, c) of the tile landing at (c, r) of the
    stored transpose; and in every 16-byte access (read i or write j of a pass) the 8 lanes
    of each phase hit 8 different bank groups (rows are 128-byte multiples apart)."""
    copy = transposing((1024, 1024), dtype, tile, major, warps)
    mapping = copy.transpose_mapping
    nbytes = DTYPES[dtype].nbytes
    assert mapping.vector * nbytes == 16
    stored_rows, stored_width = (tile[1], tile[0]) if major == "col" else tile
    assert (mapping.source_rows, mapping.source_chunks * mapping.vector) == (stored_rows, stored_width)
    moved = {}
    for thread in range(32 * warps):
        for k in range(mapping.passes):
            index = thread + k * mapping.threads
            if index >= mapping.blocks:
                continue
            row_block, chunk = mapping.block(index)
            for i in range(mapping.vector):
                for j in range(mapping.vector):
                    source = (row_block * mapping.vector + i, chunk * mapping.vector + j)
                    staging = (chunk * mapping.vector + j, row_block * mapping.vector + i)
                    assert source not in moved
                    moved[source] = staging
    assert len(moved) == stored_rows * stored_width
    assert all(staging == source[::-1] for source, staging in moved.items())
    source_row_bytes, staging_row_bytes = stored_width * nbytes, stored_rows * nbytes
    for k in range(mapping.passes):
        for phase in range(0, 32 * warps, 8):
            lanes = [t + k * mapping.threads for t in range(phase, phase + 8)]
            blocks = [mapping.block(i) for i in lanes if i < mapping.blocks]
            for offset in range(mapping.vector):
                reads = {
                    ((rb * mapping.vector + offset) * source_row_bytes + c * 16) // 16 % 8 for rb, c in blocks
                }
                writes = {
                    ((c * mapping.vector + offset) * staging_row_bytes + rb * 16) // 16 % 8
                    for rb, c in blocks
                }
                assert len(reads) == len(writes) == len(blocks)


def test_staging_tiles_follow_the_ring_and_count_in_shared_memory():
    copy = transposing((8448, 1792), "fp16", (64, 256), stages=4)
    assert copy.staging_offset % 1024 == 0
    assert copy.staging_offset >= copy.ring.ring_bytes + copy.ring.barrier_bytes
    assert copy.smem_bytes == copy.staging_offset + 2 * 32768 <= SMEM_PER_BLOCK
    assert copy.max_stages == 5  # 6 stages + 2 staging tiles of 32 KiB do not fit 227 KiB
    assert transposing((8448, 1792), "fp16", (64, 256), stages=5).smem_bytes <= SMEM_PER_BLOCK
    with pytest.raises(TmaConfigError, match="1..5 stages fit"):
        transposing((8448, 1792), "fp16", (64, 256), stages=6)
    assert "transpose         each stage into one of 2 staging tiles" in copy.summary()


@pytest.mark.parametrize(
    ("dtype", "tile", "swizzle", "match"),
    [
        ("fp16", (32, 256), 0, "multiples of 64 elements"),
        ("int8", (64, 256), 0, "multiples of 128 elements"),
        ("fp16", (64, 64), 128, "stages tiles unswizzled"),
    ],
)
def test_transposing_copies_refuse_tiles_the_transpose_cannot_serve(dtype, tile, swizzle, match):
    config = LoadConfig((1024, 1024), dtype, tile, swizzle, "col")
    with pytest.raises(TmaConfigError, match=match):
        CopyPlan(PipelinePlan(LoadPlan(config)), transpose=True)


def test_default_destination_has_the_other_contiguous_dim_with_a_padded_pitch():
    destination = copy_destination(transposing((3, 1000, 777), "bf16", (64, 256)))
    assert destination.major == "row" and destination.element_strides == (1000 * 784, 784, 1)
    same = CopyPlan(PipelinePlan(LoadPlan(LoadConfig((1000, 776), "bf16"))))
    assert copy_destination(same) == same.load.config


def test_transposing_copy_compiles_to_vector_shared_accesses_a_proxy_fence_and_a_tma_store():
    copy = transposing((1000, 3000), "fp16", (64, 256), "col", warps=4)
    ptx = compile_copy(copy, keep_ptx=True).ptx
    # 256 blocks of 8x8 over 128 threads: 2 passes of 8 reads and 8 writes, 16 bytes each.
    assert ptx.count("ld.shared.v4") == 16 and ptx.count("st.shared.v4") == 16
    assert "ld.local" not in ptx and "st.local" not in ptx  # the block stays in registers
    lines = [" ".join(line.split()) for line in ptx.splitlines()]
    fence = lines.index("fence.proxy.async.shared::cta;")
    barrier = lines.index("bar.sync 1, 128;")  # the consumer warps only
    read_wait = lines.index("cp.async.bulk.wait_group.read 0;")
    store = next(
        i for i, line in enumerate(lines) if line.startswith("cp.async.bulk.tensor.2d.global.shared::cta")
    )
    assert fence < read_wait < barrier < store  # writes fenced, other staging tile free, then the store
    assert lines[store + 1] == "cp.async.bulk.commit_group;"
    assert "cp.async.bulk.wait_group.read 0;" in lines[store:]  # staging tiles read before exit


def test_transpose_sweep_configs_are_valid_and_cover_every_dtype_and_layout():
    configs = transpose_configs(40, seed=3)
    assert {(c.dtype, c.major) for c in configs} == {(d, m) for d in DTYPES for m in ("row", "col")}
    for config in configs:
        copy = CopyPlan(PipelinePlan(LoadPlan(config), stages=2), transpose=True)
        assert copy.smem_bytes <= SMEM_PER_BLOCK
    assert sum(LoadPlan(c).has_partial_tiles for c in configs) > 20


def test_compiled_copies_are_kept_on_disk_and_loaded_back(tmp_path, monkeypatch):
    pytest.importorskip("tvm_ffi")
    from tmakit.kernels.copy import CopyKernel
    from tmakit.plan.ring import GUARD_WORDS
    from tmakit.runtime.compile import compile_kernel, fake_source, fake_tensor, placeholder_stream

    monkeypatch.setenv("TMAKIT_CACHE_DIR", str(tmp_path))
    pipeline = PipelinePlan(LoadPlan(LoadConfig((512, 512), "fp16", (64, 256))), stages=2)

    def build(key):
        src = fake_source(pipeline.load.config)
        guard = fake_tensor(__import__("cutlass").Int32, (GUARD_WORDS,))
        kernel = CopyKernel(CopyPlan(pipeline))
        return compile_kernel(
            kernel, src, src, guard, placeholder_stream(env=True), tvm_ffi=True, cache_key=key
        )

    first = build("test copy 512x512")
    assert not first.from_disk and len(list(tmp_path.glob("*.o"))) == 1
    again = build("test copy 512x512")
    assert again.from_disk and callable(again.function)
    assert again.compile_seconds < first.compile_seconds
    other = build("another key")
    assert not other.from_disk and len(list(tmp_path.glob("*.o"))) == 2
    monkeypatch.setenv("TMAKIT_CACHE_DIR", "off")
    assert not build("test copy 512x512").from_disk


def test_a_kernel_on_disk_is_loaded_without_being_built(tmp_path, monkeypatch):
    """A fresh process's first copy of a cached class builds no kernel object and describes no
    tensor (the kernel modules need not even be imported): `compiled_once` asks the disk first."""
    pytest.importorskip("tvm_ffi")
    from tmakit.runtime import compile as compile_module

    monkeypatch.setenv("TMAKIT_CACHE_DIR", str(tmp_path))
    copy = copy_class(CopyOptions(), "fp16", 2, "row", False, (16, 256), 132, True)
    first = compile_copy(copy, tvm_ffi=True, shape_generic=True)
    assert not first.from_disk
    monkeypatch.setattr(compile_module, "_COMPILED", {})  # a new process: nothing in memory
    built = []
    original = compile_module.compile_kernel
    monkeypatch.setattr(
        compile_module, "compile_kernel", lambda *a, **k: built.append(a) or original(*a, **k)
    )
    again = compile_copy(copy, tvm_ffi=True, shape_generic=True)
    assert again.from_disk and callable(again.function) and built == []


def test_a_damaged_cache_file_is_a_miss_not_an_error(tmp_path, monkeypatch):
    pytest.importorskip("tvm_ffi")
    from tmakit.runtime.compile import disk_cache_entry, load_cached

    monkeypatch.setenv("TMAKIT_CACHE_DIR", str(tmp_path))
    path, name = disk_cache_entry("anything")
    path.write_bytes(b"not an object file")
    assert load_cached(path, name) is None
    assert re.fullmatch(r"tmakit_[0-9a-f]{32}", name)


def test_compact_copies_run_over_rows_of_their_memory():
    from tmakit.config import rows_view
    from tmakit.plan.copy_defaults import copy_stages, rows_view_tile

    assert rows_view(3 * 1000 * 512, 2) == (6000, 256)  # any shape: the memory as 512-byte rows
    assert rows_view(1000 * 776, 2) == (12125, 64)  # the widest width that divides
    assert rows_view(999 * 777, 2) is None  # odd: the strided path (padded pitch) instead
    assert rows_view(48, 1) == (3, 16)  # 16 bytes at least
    # 32 KiB tiles while >= 4 per SM remain, down to 4 KiB for small copies.
    assert rows_view_tile(2 << 20, 256, 2, 132) == (64, 256)  # 1 GiB
    assert rows_view_tile(32768, 256, 2, 132) == (32, 256)  # 16 MiB: 1024 tiles
    assert rows_view_tile(2048, 256, 2, 132) == (8, 256)  # 1 MiB: 256 tiles of 4 KiB
    assert rows_view_tile(3, 16, 1, 132) == (3, 16)
    assert (copy_stages(32768), copy_stages(8192), copy_stages(4096), copy_stages(65536)) == (4, 8, 16, 4)


def test_a_rows_view_copy_compiles_for_tensors_of_another_shape():
    """The compiled copy takes (3, 1000, 512) tensors and views their memory as 6000 x 256 rows:
    2-D TMA loads and stores, no batch mode."""
    pipeline = PipelinePlan(LoadPlan(LoadConfig((6000, 256), "fp16", (32, 256))), stages=8, persistent=True)
    ptx = compile_copy(CopyPlan(pipeline), keep_ptx=True, tensor_shape=(3, 1000, 512)).ptx
    assert "cp.async.bulk.tensor.2d.global.shared::cta" in ptx
    assert "cp.async.bulk.tensor.2d.shared::cta.global" in ptx
    assert "cp.async.bulk.tensor.3d" not in ptx
