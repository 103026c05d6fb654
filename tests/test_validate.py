import re

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


@pytest.mark.parametrize(
    "config, message",
    [
        (
            LoadConfig((64, 64), "fp16", (64, 64), strides=(-64, 1)),
            "stride of dim 0 is -64 (a reversed view)",
        ),
        (
            LoadConfig((2**32, 64), "fp16", (64, 64)),
            "extent of dim 0 is 4294967296; TMA's coordinates are signed",
        ),
        (LoadConfig((2, 64), "fp16", (1, 64), strides=(2**39, 1)), "must be below 1099511627776 bytes"),
        (
            LoadConfig((2**31, 16), "fp8e4m3", (1, 16)),
            "2147483648 tile loads; tmakit's kernels count tiles in 32-bit",
        ),
        (LoadConfig((64, 64), "fp16", (64, 64, 64)), "tile is (64, 64, 64) (tuple); it must be a tuple of 2 whole numbers"),
        (LoadConfig((64, 64), "fp16", (64,)), "tile is (64,) (tuple); it must be a tuple of 2 whole numbers"),
        (LoadConfig((64, 64), "fp16", None), "tile is None (None); it must be a tuple of 2 whole numbers"),
        (LoadConfig((64, 64), "fp16", (64.0, 64.0)), "tile is (64.0, 64.0) (tuple); it must be a tuple of 2 whole numbers"),
        (LoadConfig((64, 64.5), "fp16", (64, 64)), "shape is (64, 64.5) (tuple); it must be a tuple of whole numbers"),
        (LoadConfig((64, 64), "fp16", (64, 64), strides=(64.0, 1)), "strides is (64.0, 1) (tuple); it must be a tuple of whole numbers"),
    ],
)
def test_what_tma_or_cuda_cannot_serve_is_refused_before_compiling(config, message):
    with pytest.raises(TmaConfigError, match=re.escape(message)):
        LoadPlan(config)


def test_a_dim_of_extent_1_has_no_stride_rule():
    """Its stride never reaches the tensor map: a column vector with torch's strides (1, 1) is the
    column-major matrix it is, and a batch of 1 may have any stride."""
    vector = LoadPlan(LoadConfig((256, 1), "fp16", (64, 1), strides=(1, 1)))
    assert vector.rows_contiguous and vector.config.contiguous_dim == "rows"
    assert vector.expected_tx_bytes == 128
    LoadPlan(LoadConfig((1, 992, 368), "fp8e5m2", (26, 32), strides=(1095167, 368, 1)))
    with pytest.raises(TmaConfigError, match="stride of dim 0 is 1095167 bytes"):  # a batch of 2 is stepped
        LoadPlan(LoadConfig((2, 992, 368), "fp8e5m2", (26, 32), strides=(1095167, 368, 1)))


def test_no_stages_and_cluster_kernels_of_other_ranks_are_refused():
    from tmakit import MulticastPlan, PipelinePlan

    with pytest.raises(TmaConfigError, match="0 stages; a ring needs at least 1"):
        PipelinePlan(LoadPlan(LoadConfig()), stages=0)
    for multicast in (True, False):
        with pytest.raises(TmaConfigError, match="cluster loads take 2-D tensors; this one has 3"):
            MulticastPlan(LoadPlan(LoadConfig((2, 64, 64), "fp16", (16, 64))), multicast=multicast)


def test_the_contiguous_dim_of_vectors_and_column_vectors():
    from tmakit.config import major_of

    assert major_of((1,), (1000016,)) == "row"  # a 1-D tensor (a bulk copy's rows view takes it)
    assert major_of((1, 1), (256, 1)) == "col"  # torch.zeros(256, 1)
    assert major_of((1, 1), (1, 256)) == "row"  # torch.zeros(1, 256)
    assert major_of((1, 256), (256, 1)) == "col" and major_of((256, 1)) == "row"
