"""The small public face on real tensors: describe, check, allocate, load, copy, reduce, im2col.

Every check runs before anything compiles or launches; a tensor TMA cannot serve raises
`TmaConfigError` naming the value and the rule. One module per op over the shared checks:

- `tensors`: what every call checks (torch, a tensor's kind, device and shape, a pair of tensors);
- `load`: `config_for`, `padded_empty`, `load_tiles`;
- `copy`: `copy_`, `copy`, `copy_path`, `plan_copy` and `copy_`'s dispatch, with `copy_views`: the
  launchers around a route (its views, torch's `copy_`, the empty copy);
- `reduce`: `reduce_into_`, `add_`, `reduce_path` (the path a reduce takes and why), with
  `reduce_torch`: torch's op for the tensors TMA does not serve;
- `im2col`: `im2col`, `im2col_path` (which path a call takes), `torch_im2col` (torch's expression);
- `rows`: `gather_rows`, `scatter_rows_`, `index_add_`, `index_reduce_` (rows by index through bulk
  row copies), `rows_path` (which path a call takes), with `rows_call`: a call's checks, route
  and launch;
- `many`: `copy_many_`, `pack`, `unpack_` (many tensors, one launch), `GroupedCopy` (any of them
  prepared once), with `many_route`: how a list of pairs is copied.

The functions `copy` and `im2col` shadow their modules' names on this package: a module itself is
`importlib.import_module("tmakit.api.copy")` (what a test patches is that module's global).
"""

from ..plan.copy_layout import check_copy_layout as check_copy_layout
from .copy import copy, copy_, copy_path
from .copy import copy_dispatch as copy_dispatch
from .copy import plan_copy as plan_copy
from .im2col import im2col, im2col_path
from .im2col import strided_patches as strided_patches
from .im2col import torch_im2col as torch_im2col
from .load import config_for, load_tiles, padded_empty
from .many import GroupedCopy, copy_many_, pack, unpack_
from .reduce import add_, reduce_into_, reduce_path
from .reduce import reduce_options as reduce_options
from .rows import gather_rows, index_add_, index_reduce_, rows_path, scatter_rows_
from .tensors import check_on_gpu as check_on_gpu
from .tensors import check_torch_tensor as check_torch_tensor

# The ops a user calls: `tmakit` re-exports exactly these. The names imported `as` themselves are
# building blocks that `tmakit.ops`, the bench and the tests reach as `api.NAME`.
__all__ = [
    "GroupedCopy",
    "add_",
    "config_for",
    "copy",
    "copy_",
    "copy_many_",
    "copy_path",
    "gather_rows",
    "im2col",
    "im2col_path",
    "index_add_",
    "index_reduce_",
    "load_tiles",
    "pack",
    "padded_empty",
    "reduce_into_",
    "reduce_path",
    "rows_path",
    "scatter_rows_",
    "unpack_",
]
