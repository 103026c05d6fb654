import pytest

from tmakit import SEED, LoadConfig, LoadPlan, PipelinePlan, TmaConfigError


def test_seed_arithmetic():
    plan = LoadPlan(SEED)
    assert plan.grid == 132
    assert plan.tiles_per_block == 7
    assert plan.total_tile_loads == 924
    assert plan.expected_tx_bytes == 32768
    assert plan.smem_bytes == 32776
    assert plan.barrier_bytes == 8
    assert [plan.phase_parity(j) for j in range(7)] == [0, 1, 0, 1, 0, 1, 0]
    assert plan.tile_origin(1, 2) == (64, 512)
    assert not plan.has_partial_tiles
    assert plan.padded_shape == SEED.shape


def test_seed_summary_and_diagram_show_the_seed_numbers():
    plan = LoadPlan(SEED)
    summary = plan.summary()
    for fact in ("132 blocks", "tiles per block   7", "924", "32776 bytes", "32768 bytes"):
        assert fact in summary
    diagram = plan.diagram((1, 2))
    assert "block 1    [   ][   ][ X ][   ]" in diagram
    assert "rows 64-127, columns 512-767" in diagram
    assert "block 131" in diagram
    assert diagram.count("X") == 1


@pytest.mark.parametrize(
    "config, grid, tiles, tx_bytes, partial",
    [
        (LoadConfig((1000, 776), "bf16", (128, 64)), 8, 13, 16384, True),
        (LoadConfig((4096, 4096), "fp32", (32, 32)), 128, 128, 4096, False),
        (LoadConfig((1, 16), "int8", (1, 16)), 1, 1, 16, False),
        (LoadConfig((300, 64), "fp8e4m3", (256, 64)), 2, 1, 16384, True),
    ],
)
def test_other_shapes(config, grid, tiles, tx_bytes, partial):
    plan = LoadPlan(config)
    assert (plan.grid, plan.tiles_per_block, plan.expected_tx_bytes) == (grid, tiles, tx_bytes)
    assert plan.total_tile_loads == grid * tiles
    assert plan.smem_bytes == tx_bytes + 8
    assert plan.has_partial_tiles == partial
    rows, cols = plan.padded_shape
    assert rows >= config.shape[0] and rows % config.tile[0] == 0
    assert cols >= config.shape[1] and cols % config.tile[1] == 0


def test_highlight_outside_the_grid_is_refused():
    with pytest.raises(ValueError, match="outside"):
        LoadPlan(SEED).diagram((132, 0))


def test_partial_highlight_reports_clipped_extent():
    plan = LoadPlan(LoadConfig((100, 776), "fp16", (64, 256)))
    assert "rows 64-99, columns 768-775" in plan.diagram((1, 3))


def test_the_diagram_stays_small_for_any_shape():
    """62.5 million column tiles and 16,384 row blocks: the first, the highlighted and the last
    of each are drawn, "..." between (the diagram of a 16 x 10^9 tensor once printed 801 MB)."""
    wide = LoadPlan(LoadConfig((16, 10**9), "fp8e4m3", (16, 16))).diagram((0, 5000))
    tall = LoadPlan(LoadConfig((2**20, 16), "fp8e4m3", (64, 16))).diagram((9000, 0))
    for diagram in (wide, tall):
        assert len(diagram) < 1000 and len(diagram.splitlines()) <= 9
    assert "5000" in wide.splitlines()[0] and "62499999" in wide.splitlines()[0]
    assert "[ X ]" in wide and "block 9000" in tall and "block 16383" in tall


def test_the_copy_keywords_type_is_copy_options_but_tile_and_stages():
    """`**options: Unpack[CopyKeywords]` in copy_'s signature: a type checker sees every option by
    its name and type, so a new CopyOptions field must appear there too."""
    import dataclasses

    from tmakit.plan.copy import CopyKeywords, CopyOptions

    fields = {field.name: str(field.type) for field in dataclasses.fields(CopyOptions)}
    del fields["tile"], fields["stages"]
    keywords = {
        name: getattr(hint, "__forward_arg__", hint) for name, hint in CopyKeywords.__annotations__.items()
    }
    assert keywords == fields and not CopyKeywords.__total__
    import inspect

    import tmakit

    for function in (tmakit.copy_, tmakit.copy, tmakit.copy_path, tmakit.reduce_into_, tmakit.add_):
        (options,) = [p for p in inspect.signature(function).parameters.values() if p.kind is p.VAR_KEYWORD]
        assert options.annotation == "Unpack[CopyKeywords]", function.__name__


def test_compact_copies_beyond_the_l2_take_the_rows_view_by_default():
    from tmakit.plan.copy import CopyOptions, default_as_rows

    big = 64 * 2**20 // 2  # fp16 elements of 64 MiB: 256 divides them
    assert default_as_rows(CopyOptions(), False, True, False, big, 2)
    assert not default_as_rows(CopyOptions(), False, True, True, big, 2)  # fits the L2
    assert not default_as_rows(CopyOptions(), True, True, False, big, 2)  # changes the layout
    assert not default_as_rows(CopyOptions(), False, False, False, big, 2)  # a strided tensor
    assert not default_as_rows(CopyOptions(stages=4), False, True, False, big, 2)  # options given
    assert not default_as_rows(CopyOptions(), False, True, False, big + 128, 2)  # 128-wide rows only


def test_a_persistent_ring_past_a_32_bit_grid_is_refused_however_it_is_built():
    """Any persistent ring (a copy's, a reduce's, one built directly) whose grid the shape-generic
    kernels' host code could not count in 32 bits."""
    load = LoadPlan(LoadConfig())
    with pytest.raises(TmaConfigError, match="32-bit integers"):
        PipelinePlan(load, persistent=True, sm_count=2**31)
    with pytest.raises(TmaConfigError, match="32-bit integers"):
        PipelinePlan(load, persistent=True, sm_count=2**16, blocks_per_sm=2**16)
    assert PipelinePlan(load, sm_count=2**31).sm_count == 2**31  # not persistent: the tiles' grid
