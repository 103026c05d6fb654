"""tmakit: Hopper TMA tile-movement kernels in CuTe DSL, verified, timed and explained.

The public API is here: `config_for`, `padded_empty`, `load_tiles`, `copy`, `copy_` (with
`CopyOptions`; `copy_path` names the path a copy takes), `reduce_into_` and `add_` (TMA reduce
stores, torch's op for tensors TMA cannot serve; `reduce_path` names the path a call takes),
`im2col` (TMA im2col loads, torch's expression where TMA cannot serve; `im2col_path` names the
path), `gather_rows`, `scatter_rows_`, `index_add_`, `index_reduce_` (rows by index through bulk
row copies; `rows_path` names the path), `copy_many_`, `pack`, `unpack_` (many tensors, one
launch; `GroupedCopy` prepares them once for lists that stay put), `lint` (a CuTe DSL function's
TMA data movement checked from its compiled PTX and MLIR; `lint_text` of captured text; both give
a `LintReport`), `sm_budget` (every movement call inside it on a budget of SMs, as its
`sms=`), the configuration and plan types and the errors (`TmaConfigError`;
`TorchOpError`, torch's own op refusing a call tmakit handed it, is also a `RuntimeError`).
`tmakit.lint` is the function; its package is `tmakit.linter`.
Building blocks for your own kernel: `tmakit.plan` (the plans), `tmakit.kernels` (`TileRing`
and the TMA view helpers) and a family's kernel (`tmakit.patches.kernel.make_im2col_load_atom`).
Each family is a package named apart from its functions (`tmakit.copies` beside `tmakit.copy`,
`tmakit.patches` beside `tmakit.im2col`), so no function shadows a module.
"""

import importlib
import inspect
from collections.abc import Iterable
from typing import Any

from . import api, registry
from .api import *  # noqa: F403  the ops: `api.__all__` (the copy's among them: `tmakit.copies`)
from .api import nvtx
from .config import SEED, LoadConfig
from .errors import TmaConfigError, TmaHangError, TorchOpError
from .linter import LintReport, lint, lint_text
from .plan import CopyOptions, LoadPlan, PipelinePlan
from .plan.budget import sm_budget
from .validate import flag

__all__ = [
    "SEED",
    "CopyOptions",
    "LoadConfig",
    "LintReport",
    "LoadPlan",
    "PipelinePlan",
    "TmaConfigError",
    "TmaHangError",
    "TorchOpError",
    "lint",
    "lint_text",
    "sm_budget",
]
__all__ += api.__all__
# Each family's public functions: its api's `__all__` (`tmakit.registry`); the copy's are also
# `api`'s, listed once.
_exports = {name: getattr(module, name) for module in registry.parts("api") for name in module.__all__}
globals().update(_exports)
__all__ += [name for name in _exports if name not in api.__all__]
del _exports
if nvtx.NVTX_ON:  # TMAKIT_NVTX=1: each public function reading tensors in an NVTX range
    globals().update(
        {
            name: nvtx.ranged(name, globals()[name])
            for name in __all__
            if inspect.isfunction(globals()[name]) and name not in nvtx.UNRANGED
        }
    )
__version__ = "0.1.0"


def _overrides() -> Any:
    """`tmakit.overrides` (it imports torch: read by name at the first call, as the registry reads
    a family, so that `import tmakit` stays light)."""
    return importlib.import_module(f"{__name__}.overrides")


def enable(ops: Iterable[str] | str | None = None) -> list[str]:
    """Serve torch's own ops on CUDA tensors by tmakit's routes, without touching model code:
    tmakit's kernel is installed under each aten op of `ops` (a name or names; None: every op
    tmakit overrides), the kernel that was there kept. A call tmakit's route takes runs tmakit's
    path; every other (another device, a layout torch's kernel serves as fast, a rule) goes to the
    kept kernel after a check of a few attributes, no plan built. Works below autograd, in CUDA
    graphs and on side streams; under `torch.compile` inductor's own kernels are left alone.

    Args:
        ops: aten op names, e.g. ["copy_", "index_select"]; None: all (`tmakit.overrides.available`).

    Returns:
        The ops now overridden, sorted.

    Raises:
        TmaConfigError: a name tmakit does not override (naming those it does)."""
    return _overrides().enable(ops)


def disable(ops: Iterable[str] | str | None = None) -> list[str]:
    """Remove the overrides `enable` installed for `ops`; torch's own kernels serve those ops again.

    Args:
        ops: aten op names; None: every op overridden.

    Returns:
        The ops still overridden, sorted.

    Raises:
        TmaConfigError: a name tmakit does not override."""
    return _overrides().disable(ops)


def enabled(ops: Iterable[str] | str | None = None) -> Any:
    """`enable(ops)` for a `with` block, the overrides it installed removed after.

    Args:
        ops: as `enable`'s.

    Returns:
        A context manager; `with tmakit.enabled() as installed:` gives the ops overridden inside.

    Raises:
        TmaConfigError: a name tmakit does not override (here, before the block)."""
    overrides = _overrides()
    overrides.chosen(ops)  # named now, not when the block starts
    return overrides.enabled(ops)


def stats(reset: bool = False) -> dict[tuple[str, str, str], int]:
    """Calls the overrides saw since the process began (or the last reset).

    Args:
        reset: start the counts again after reading them.

    Returns:
        Calls by (aten op, path, reason): path "tmakit" (tmakit's route served the call) or
        "torch" (handed back to torch's kernel, the reason why).

    Raises:
        TmaConfigError: a `reset` that is not a bool."""
    return _overrides().stats(flag(reset, "stats' reset"))


__all__ += ["disable", "enable", "enabled", "stats"]
