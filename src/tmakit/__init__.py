"""tmakit: Hopper TMA tile-movement kernels in CuTe DSL, verified, timed and explained.

The public API is here: `config_for`, `padded_empty`, `load_tiles`, `copy`, `copy_` (with
`CopyOptions`; `copy_path` names the path a copy takes), `reduce_into_` and `add_` (TMA reduce
stores, torch's op for tensors TMA cannot serve; `reduce_path` names the path a call takes),
`im2col` (TMA im2col loads, torch's expression where TMA cannot serve; `im2col_path` names the
path), `gather_rows`, `scatter_rows_`, `index_add_`, `index_reduce_` (rows by index through bulk
row copies; `rows_path` names the path), `copy_many_`, `pack`, `unpack_` (many tensors, one
launch; `GroupedCopy` prepares them once for lists that stay put), `lint` (a CuTe DSL function's
TMA data movement checked from its compiled PTX and MLIR; `lint_text` of captured text; both give
a `LintReport`), the configuration and plan types and the errors (`TmaConfigError`;
`TorchOpError`, torch's own op refusing a call tmakit handed it, is also a `RuntimeError`).
`tmakit.lint` is the function; its package is `tmakit.linter`.
Building blocks for your own kernel: `tmakit.plan` (the plans), `tmakit.kernels` (`TileRing`
and the TMA view helpers) and a family's kernel (`tmakit.patches.kernel.make_im2col_load_atom`).
Each family is a package named apart from its functions (`tmakit.copies` beside `tmakit.copy`,
`tmakit.patches` beside `tmakit.im2col`), so no function shadows a module.
"""

from . import api, registry
from .api import *  # noqa: F403  the ops: `api.__all__` (the copy's among them: `tmakit.copies`)
from .config import SEED, LoadConfig
from .errors import TmaConfigError, TmaHangError, TorchOpError
from .linter import LintReport, lint, lint_text
from .plan import CopyOptions, LoadPlan, PipelinePlan

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
]
__all__ += api.__all__
# Each family's public functions: its api's `__all__` (`tmakit.registry`); the copy's are also
# `api`'s, listed once.
_exports = {name: getattr(module, name) for module in registry.parts("api") for name in module.__all__}
globals().update(_exports)
__all__ += [name for name in _exports if name not in api.__all__]
del _exports
__version__ = "0.1.0"
