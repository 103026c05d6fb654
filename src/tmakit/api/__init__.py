"""The small public face on real tensors: describe, check, allocate, copy.

Every check runs before anything compiles or launches; a tensor TMA cannot serve raises
`TmaConfigError` naming the value and the rule. One module per op over the shared checks:

- `tensors`: what every call checks (torch, a tensor's kind, device and shape, a pair of tensors);
- `load`: `config_for`, `padded_empty`;
- `copy`: `copy_`, `copy`, `copy_path`, `plan_copy` and `copy_`'s dispatch, with `copy_views`: the
  launchers around a route (its views, torch's `copy_`, the empty copy);

The families' functions (tile loads, rows by index, many tensors, reduce stores, im2col) are each
in its package (`tmakit.registry`). The function `copy` shadows its module's name on this
package: the module itself is `importlib.import_module("tmakit.api.copy")` (what a test patches is
that module's global).
"""

from ..plan.copy_layout import check_copy_layout as check_copy_layout
from .copy import copy, copy_, copy_path
from .copy import copy_dispatch as copy_dispatch
from .copy import plan_copy as plan_copy
from .load import config_for, padded_empty
from .tensors import check_on_gpu as check_on_gpu
from .tensors import check_torch_tensor as check_torch_tensor

# The ops a user calls: `tmakit` re-exports exactly these (and each family's: `tmakit.registry`).
# The names imported `as` themselves are building blocks that `tmakit.ops`, the bench and the
# tests reach as `api.NAME`.
__all__ = [
    "config_for",
    "copy",
    "copy_",
    "copy_path",
    "padded_empty",
]
