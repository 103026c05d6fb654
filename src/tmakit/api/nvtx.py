"""NVTX ranges on request: with `TMAKIT_NVTX=1` (read at import) each public function `tmakit`
exports that moves tensors runs inside an NVTX range named `tmakit.<function>`, so that an Nsight
Systems timeline (or torch's profiler with NVTX) shows which tmakit call launched which kernels,
beside the kernels' own names (each carries `tmakit`: the DSL names a kernel by its module). Off,
`tmakit` exports its functions themselves: nothing wrapped, no cost. Where torch has no NVTX (a
CPU build) the ranges are skipped, warned once; while torch.compile traces, the function is
called as it is."""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable
from typing import Any

NVTX_VARIABLE = "TMAKIT_NVTX"
NVTX_ON = os.environ.get(NVTX_VARIABLE, "") not in ("", "0")
RANGE_PREFIX = "tmakit."
# The public functions that read no tensor: no range, and no torch imported for them.
UNRANGED = frozenset({"config_for", "lint", "lint_text"})
_FOUND: dict[str, Any] = {}  # "torch": torch once its NVTX was tried; None where it has none


def _nvtx_torch() -> Any:
    """torch, where its NVTX bindings work (tried once, by a range pushed and popped), else None
    (warned once). Read at a call: `import tmakit` loads no torch."""
    if "torch" not in _FOUND:
        import torch

        try:
            torch.cuda.nvtx.range_push(RANGE_PREFIX + "probe")
            torch.cuda.nvtx.range_pop()
            _FOUND["torch"] = torch
        except (RuntimeError, AttributeError) as error:
            _FOUND["torch"] = None
            warnings.warn(f"{NVTX_VARIABLE}=1: torch has no NVTX here ({error}); no ranges", stacklevel=3)
    return _FOUND["torch"]


def ranged(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` inside an NVTX range `tmakit.<name>` (pushed before, popped after, raised or not)."""
    label = RANGE_PREFIX + name

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        torch = _nvtx_torch()
        if torch is None or torch.compiler.is_compiling():
            return function(*args, **kwargs)
        torch.cuda.nvtx.range_push(label)
        try:
            return function(*args, **kwargs)
        finally:
            torch.cuda.nvtx.range_pop()

    return call
