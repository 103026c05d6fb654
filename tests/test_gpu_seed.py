"""The seed's experiment on the device: every element of every tile, and fault injection."""

import pytest

from tmakit import SEED, LoadConfig, LoadPlan

pytestmark = pytest.mark.gpu


def test_seed_kernel_loads_every_tile_correctly():
    from tmakit.load.check import verify_tile_load

    verdict = verify_tile_load(LoadPlan(SEED))
    assert verdict.ok, str(verdict)
    assert str(verdict) == "924/924 tiles correct"


@pytest.mark.parametrize(
    "config",
    [
        LoadConfig((1000, 776), "fp16", (64, 128)),
        LoadConfig((777, 1040), "bf16", (128, 64)),
        LoadConfig((513, 520), "fp32", (32, 32)),
        LoadConfig((250, 4000), "int8", (64, 256)),
    ],
    ids=str,
)
def test_other_shapes_including_partial_tiles(config):
    from tmakit.load.check import verify_tile_load

    verdict = verify_tile_load(LoadPlan(config))
    assert verdict.ok, str(verdict)


@pytest.mark.parametrize("tile_shift", [(1, 0), (-1, 0), (0, 1), (0, -1)])
def test_verifier_catches_a_kernel_that_loads_the_neighbouring_tile(tile_shift):
    from tmakit.load.check import verify_tile_load

    verdict = verify_tile_load(LoadPlan(SEED), tile_shift=tile_shift)
    assert not verdict.ok
    assert verdict.tiles_correct == 0
    first = verdict.first_mismatch
    assert (first.row_block, first.column_tile) == (0, 0)
    assert "tile (row_block=0, column_tile=0)" in str(verdict)
