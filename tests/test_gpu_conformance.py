"""The CPU model against the hardware, byte for byte: every swizzle mode x element width x full and
partial tiles, raw shared memory after a TMA load compared with `tmakit.model`."""

import pytest

from tmakit import LoadConfig, LoadPlan
from tmakit.config import padded_strides

pytestmark = pytest.mark.gpu

WIDTH_DTYPES = {1: "uint8", 2: "bf16", 4: "fp32"}


@pytest.mark.parametrize("swizzle", [0, 32, 64, 128])
@pytest.mark.parametrize("width", [1, 2, 4])
@pytest.mark.parametrize("partial", [False, True], ids=["full", "partial"])
def test_shared_memory_bytes_match_the_model(swizzle, width, partial):
    from tmakit.check import reference
    from tmakit.load.check import dump_shared_bytes

    inner = (swizzle or 64) // width
    shape = (64 * 3 + (17 if partial else 0), inner * 4 + (5 if partial else 0))
    config = LoadConfig(shape, WIDTH_DTYPES[width], (64, inner), swizzle, "row", padded_strides(shape, width))
    plan = LoadPlan(config)
    assert plan.has_partial_tiles == partial
    verdict = reference.compare_shared_bytes(plan, dump_shared_bytes(plan))
    assert verdict.ok, str(verdict)
