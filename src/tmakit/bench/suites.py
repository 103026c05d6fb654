"""What the timing suites share (each family's is its `bench` part): the rotated buffers that
defeat the L2 and the eager-timing rule, so that every family times tmakit's kernels beside torch
(and Triton) on the same configuration, same run, same timer."""

from __future__ import annotations

from ..check.inputs import make_input_tensor
from ..plan import LoadPlan


def rotation_buffers(bytes_per_launch: int, l2_bytes: int, hot_l2: bool = False) -> int:
    """Buffers to rotate over so a pass touches more than 4x the L2 (1 when timing L2-hot)."""
    if hot_l2:
        return 1
    return max(2, 4 * l2_bytes // bytes_per_launch + 1)


def rotated_sources(plan: LoadPlan, l2_bytes: int, hot_l2: bool) -> list:
    """The plan's position-dependent input and copies of it (copies, not views: each buffer must
    be its own memory for the rotation to defeat the L2), `rotation_buffers` in all."""

    first = make_input_tensor(plan)
    return [first] + [first.clone() for _ in range(rotation_buffers(plan.tensor_bytes, l2_bytes, hot_l2) - 1)]


# Copies at least this large are also timed eagerly (`stream_samples_us`): long enough that the
# host's cost per call (host-cost.json) stays ahead of the GPU.
STREAM_TIMED_BYTES = 16 * 2**20
STREAM_TIMED = "[stream]"


DEFAULT_REDUCE_CASES = ("add:fp32,fp16,bf16", "min:fp16,bf16", "max:fp16,bf16")
