"""An SM budget: a movement kernel confined to `sms` SMs, so that it can run beside a kernel that
holds the others (a GEMM with an SM carveout, or in a green context of the rest). What every
family's `sms=` and `tmakit.sm_budget` mean, once. Pure Python.

A budgeted call runs a persistent grid of exactly `sms` blocks (fewer only where it has fewer
steps), one per SM: each block asks for more than half an SM's shared memory, so no two share an
SM. Each block's ring keeps `BUDGET_BYTES_IN_FLIGHT` of loads in flight (where shared memory
allows): with few SMs, the bandwidth one SM reaches is what its loads in flight over the memory's
latency allow (Little's law), so a budgeted block carries a deeper ring than a full grid's. A
budgeted compact copy of one layout goes to the copy engine, which takes no SM at all, unless the
call is strict (which asks for TMA).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from ..errors import TmaConfigError
from ..limits import SMEM_PER_SM
from ..validate import whole_number

# Loads in flight per budgeted block: Little's law at about 85% of the H200's copy ceiling over
# ~16 SMs and ~0.6 us of latency asks 65-90 KB; a ring of twice that keeps the stores' stages too.
# Not yet measured: benchmarks/probes/sm_budget.py gives the rate against the SM count.
BUDGET_BYTES_IN_FLIGHT = 128 * 1024
# The shared memory a budgeted block asks for at least: two blocks of this (and the 1 KiB each
# block reserves) exceed one SM's, so the grid's blocks take one SM each.
ONE_BLOCK_PER_SM_SMEM = SMEM_PER_SM // 2


class _Budget(threading.local):
    """The enclosing `sm_budget`'s SMs, per thread (torch.compile reads it as a value it guards, so
    a traced call records the budget it was traced under). A class default: a thread that never
    set one reads None without a failed lookup (a tenth of the cost, on every call)."""

    sms: int | None = None


_BUDGET = _Budget()


def check_sms(sms: object, what: str = "sms") -> int | None:
    """`sms` as an int >= 1, or None (the whole GPU); TmaConfigError naming the rule otherwise."""
    if sms is None:
        return None
    return whole_number(sms, f"{what} (an SM budget; None for the whole GPU)", 1)


@contextlib.contextmanager
def sm_budget(sms: int | None) -> Iterator[int | None]:
    """Every tmakit movement call the thread makes inside the block runs on `sms` SMs, as if it
    passed `sms=` (a call's own `sms=` wins); `None` lifts an enclosing budget. A function
    torch.compile traces inside the block records the budget; autograd's backward threads see
    none (`moe_dispatch` and `moe_combine` keep their forward's for their backward).

    Args:
        sms: the SMs each call's persistent grid takes (1..the GPU's SM count, checked per call
            against its GPU), or None for the whole GPU.
    Returns:
        A context manager; `with tmakit.sm_budget(16) as sms:` gives `sms`.
    Raises:
        TmaConfigError: `sms` not a whole number >= 1 (a budget past the GPU's SM count is refused
            by the call that would run on it)."""
    sms = check_sms(sms)
    outer = current_budget()
    _BUDGET.sms = sms
    try:
        yield sms
    finally:
        _BUDGET.sms = outer


def current_budget() -> int | None:
    """The enclosing `sm_budget`'s SMs in this thread, or None."""
    return _BUDGET.sms


def call_budget(sms: object) -> int | None:
    """A call's budget: its own `sms` (checked), else the enclosing `sm_budget`'s."""
    return current_budget() if sms is None else check_sms(sms)


def with_budget(options: dict) -> dict:
    """A call's keyword options with the enclosing `sm_budget`'s `sms` where the call gave none
    (the same dict where there is no budget to add: the common call pays one lookup)."""
    budget = current_budget()
    if budget is None or options.get("sms") is not None:
        return options
    return {**options, "sms": budget}


def budgeted_sm_count(sms: int | None, sm_count: int) -> int:
    """The SMs a call's persistent grid takes on a GPU of `sm_count` SMs: all of them without a
    budget, else `sms`, refused (TmaConfigError naming the GPU's count) past them."""
    if sms is None:
        return sm_count
    sms = check_sms(sms)
    if sms > sm_count:
        raise TmaConfigError(
            f"sms={sms}: this GPU has {sm_count} SMs; a budget takes 1..{sm_count} (None: all of them)"
        )
    return sms


def budget_grid(sms: int | None, sm_count: int) -> dict[str, object]:
    """A plan's grid fields on a GPU of `sm_count` SMs on a budget of `sms` (None: none):
    `sm_count` (`budgeted_sm_count`) and `one_block_per_sm`, as the plans take them."""
    return {"sm_count": budgeted_sm_count(sms, sm_count), "one_block_per_sm": sms is not None}


def budget_stages(stage_bytes: int, least: int, most: int) -> int:
    """A budgeted ring's depth: `BUDGET_BYTES_IN_FLIGHT` of stages of `stage_bytes`, at least
    `least` (a full grid's default), at most `most` (what shared memory holds)."""
    return min(most, max(least, -(-BUDGET_BYTES_IN_FLIGHT // stage_bytes)))
