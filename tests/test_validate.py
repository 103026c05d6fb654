import pytest

from tmakit import LoadConfig, LoadPlan, TmaConfigError
from tmakit.validate import check_base_address


@pytest.mark.parametrize(
    "config, message",
    [
        (LoadConfig(tile=(64, 512)), "tile columns is 512; a TMA box dimension must be 1..256"),
        (LoadConfig(tile=(300, 64)), "tile rows is 300"),
        (LoadConfig(tile=(64, 4)), "4 fp16 = 8 bytes; TMA needs a multiple of 16"),
        (LoadConfig((1000, 777), "bf16", (64, 64)), "stride of dim 0 is 1554 bytes"),
        (LoadConfig(dtype="fp64"), "dtype 'fp64' is not supported"),
        (LoadConfig((1024, 1024), "fp32", (256, 256)), "at most 232448"),
        (LoadConfig((0, 1024)), "tensor extent of dim 0 is 0"),
    ],
)
def test_bad_configurations_are_refused_with_the_rule(config, message):
    with pytest.raises(TmaConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        LoadPlan(config)


def test_base_address_alignment():
    check_base_address(0x7F0000000010)
    with pytest.raises(TmaConfigError, match="not 16-byte aligned"):
        check_base_address(0x7F0000000008)


def test_largest_legal_tile_is_accepted():
    plan = LoadPlan(LoadConfig((1024, 1024), "fp16", (256, 256)))
    assert plan.smem_bytes == 256 * 256 * 2 + 8


def test_broadcast_strides_and_huge_batches_are_refused():
    with pytest.raises(TmaConfigError, match="stride of dim 0 is 0"):
        LoadPlan(LoadConfig((64, 256), strides=(0, 1)))
    with pytest.raises(TmaConfigError, match="70000 batch matrices"):
        LoadPlan(LoadConfig((70000, 16, 16), "fp32", (16, 16)))


def test_pipeline_plan_refuses_an_empty_grid():
    from tmakit.plan import PipelinePlan

    with pytest.raises(TmaConfigError, match="sm_count 0"):
        PipelinePlan(LoadPlan(LoadConfig()), persistent=True, sm_count=0)
