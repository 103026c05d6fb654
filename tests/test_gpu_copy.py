"""TMA store and tmakit.copy on the device: a 100-configuration random sweep (every dtype x
swizzle x layout cell, partial tiles, 1/2/4 stages, persistent or not) and the torch API (both
passed on the H200 on 2026-12-02, gpu-check-64e5a76)."""

import random

import pytest

import tmakit
from tmakit import LoadPlan, TmaConfigError
from tmakit.plan import PipelinePlan
from tmakit.sweep import sweep_configs

pytestmark = pytest.mark.gpu


def test_a_random_sweep_of_copies_verifies():
    from tmakit.pipelines import verify_pipelined_load

    rng = random.Random(6)
    for config in sweep_configs(100, seed=6):
        pipeline = PipelinePlan(LoadPlan(config), stages=rng.choice((1, 2, 4)), persistent=rng.random() < 0.5)
        verdict = verify_pipelined_load(pipeline, "copy", hang_guard=True)
        assert verdict.ok, f"{config}: {verdict}"


def test_copy_api_on_torch_tensors():
    import torch

    x = torch.randn(1000, 776, device="cuda").to(torch.bfloat16)
    y = tmakit.copy(x)
    assert y.data_ptr() != x.data_ptr() and torch.equal(y.view(torch.int16), x.view(torch.int16))
    odd = tmakit.padded_empty((3, 999, 777), torch.float16)
    odd.copy_(torch.randn(3, 999, 777, device="cuda"))
    out = tmakit.padded_empty((3, 999, 777), torch.float16)
    assert tmakit.copy_(out, odd) is out and torch.equal(out, odd)
    with pytest.raises(TmaConfigError, match="layout-changing copies are not implemented yet"):
        tmakit.copy_(torch.empty(776, 1000, device="cuda", dtype=torch.bfloat16).t(), x)
    with pytest.raises(TmaConfigError, match="they must match"):
        tmakit.copy_(torch.empty(10, 16, device="cuda", dtype=torch.bfloat16), x)
