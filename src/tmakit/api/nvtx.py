"""NVTX ranges on request: with `TMAKIT_NVTX=1` (read at import) each public function `tmakit`
exports runs inside an NVTX range named `tmakit.<function>`, so that an Nsight Systems timeline
(or torch's profiler with NVTX) shows which tmakit call launched which kernels, beside the
kernels' own names (each carries `tmakit`: the DSL names a kernel by its module). Off, `tmakit`
exports its functions themselves: nothing wrapped, no cost."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

NVTX_VARIABLE = "TMAKIT_NVTX"
NVTX_ON = os.environ.get(NVTX_VARIABLE, "") not in ("", "0")
RANGE_PREFIX = "tmakit."


def _nvtx() -> Any:
    """torch's NVTX bindings (`torch.cuda.nvtx`), read at a call: `import tmakit` loads no torch."""
    import torch.cuda.nvtx

    return torch.cuda.nvtx


def ranged(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` inside an NVTX range `tmakit.<name>` (pushed before, popped after, raised or not)."""
    label = RANGE_PREFIX + name

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        nvtx = _nvtx()
        nvtx.range_push(label)
        try:
            return function(*args, **kwargs)
        finally:
            nvtx.range_pop()

    return call
