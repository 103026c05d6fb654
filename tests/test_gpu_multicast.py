"""Multicast on the device: every CTA of every cluster holds every complete tile (written, not
yet run on a GPU: the device time of the session that wrote it ran out)."""

import pytest

from tmakit import SEED, LoadConfig, LoadPlan
from tmakit.plan import CLUSTER_SHAPES, MulticastPlan

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("multicast", [True, False], ids=["multicast", "baseline"])
@pytest.mark.parametrize("cluster", CLUSTER_SHAPES)
@pytest.mark.parametrize(
    "config", [SEED, LoadConfig((1000, 776), "bf16", (64, 64), 128)], ids=["seed", "partial-swizzled"]
)
def test_every_cta_receives_every_tile(config, cluster, multicast):
    from tmakit.loads import verify_multicast_load

    verdicts = verify_multicast_load(MulticastPlan(LoadPlan(config), cluster, multicast))
    for rank, verdict in enumerate(verdicts):
        assert verdict.ok, f"CTA {rank} of the cluster: {verdict}"
