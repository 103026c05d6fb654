"""The small public face on real tensors: describe, check, allocate.

Every check runs before anything compiles or launches; a tensor TMA cannot serve raises
`TmaConfigError` naming the value and the rule. One module per concern over the shared checks:

- `tensors`: what every call checks (torch, a tensor's kind, device and shape, a pair of tensors);
- `load`: `config_for`, `padded_empty`.

The families' functions (copies, tile loads, rows by index, many tensors, reduce stores, im2col)
are each in its package (`tmakit.registry`). The copy's (`copy_`, `copy`, `copy_path`, of
`tmakit.copies`) are this module's too, as they were before the copy had a package: read through
the registry at their first use here (`__getattr__`), then kept.
"""

from typing import Any

from .. import registry
from ..plan.copy_layout import check_copy_layout as check_copy_layout
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


def __getattr__(name: str) -> Any:
    """A name of `__all__` this module does not define: the function of the family that exports
    it (the copy's, `registry.exporting`), kept here once read."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    function = globals()[name] = getattr(registry.exporting(name), name)
    return function
