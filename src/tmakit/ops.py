"""tmakit's tile loads as torch operators, and each family's (its `op` part, `tmakit.registry`);
`import tmakit.ops` registers them.

    torch.ops.tmakit.copy_(dst, src, options="") -> None; .typed(...) (`tmakit.copies.op`)
    torch.ops.tmakit.copy(src, options="") -> Tensor; .typed(...) (`tmakit.copies.op`)
    torch.ops.tmakit.reduce_into_(dst, src, op="add") -> None; .typed(...) (`tmakit.reduce.op`)
    torch.ops.tmakit.load_tiles(tensor, tile_rows=64, tile_cols=256, swizzle=0) -> Tensor
    torch.ops.tmakit.im2col(x, kernel, stride=1, padding=0, dilation=1) -> Tensor (`tmakit.im2col.op`)
    torch.ops.tmakit.gather_rows, scatter_rows_, index_add_, index_reduce_ (`tmakit.rows.op`)
    torch.ops.tmakit.copy_many_, pack, unpack_ (`tmakit.many.op`)

Each op is defined in a `torch.library.Library`, not as a `custom_op` (whose Python layers cost
several launches' host time), with a fake implementation that is also its Meta kernel, so
`torch.compile`, `make_fx` and `torch.export` know its output without running it; CUDA-graph
capture records its launch. `copy_` and `reduce_into_` run under CompositeExplicitAutograd, return
None (aot_autograd functionalizes them from `Tensor(a0!) dst`) and bump dst's version counter.
`copy`, `load_tiles` and `im2col` have an Autograd kernel that calls the real implementation
directly for a plain CUDA (or CPU) tensor, an autograd.Function for one that needs a gradient
(copy's is the identity; the others' backward raises), and redispatches anything else (a trace's
tensors, a conjugate view). An op's `typed` overload takes each `CopyOptions` field as a typed
keyword; `default` takes the options text `CopyOptions.parse` reads, and boxes fewer arguments.

`load_tiles`' kernels are in `tmakit.ops_tiles`; what every op module shares (the library, the
checks of tensors without memory, the device guard, the copy's options as schema arguments, the
Autograd kernel of an op without a gradient) in `tmakit.ops_base`.

One rule for every op, these and the families' alike: an op is strict. It runs
its `tmakit` function with `strict=True`, on torch's current stream and under the tensor's GPU's
guard, so it serves a call by TMA on a Hopper GPU and refuses with `TmaConfigError` anything TMA
does not serve; its fake refuses while tracing what it can tell without memory. A tensor off a
CUDA device (CPU, meta) is refused eagerly and while tracing, never handed to torch's op: the
functions (`tmakit.copy_`, `tmakit.gather_rows`, ...) are the path that serves every tensor
torch takes (docs/api.md, "torch ops"). This module imports torch; `import tmakit` does not."""

from __future__ import annotations

import torch

from . import registry
from .config import SEED
from .ops_base import copy_kwargs, define, not_differentiable
from .ops_tiles import load_tiles_fake, load_tiles_impl

SCHEMAS = {
    # `int`, not SymInt: a tile and a swizzle are constants of the compiled kernel
    "load_tiles": (
        f"load_tiles(Tensor tensor, int tile_rows={SEED.tile[0]}, int tile_cols={SEED.tile[1]}, "
        "int swizzle=0) -> Tensor"
    ),
}


# -- registration, on import ----------------------------------------------------------------------
def register() -> torch.library.Library:
    """Define the ops and register their kernels; the library returned must live as long as
    the process (dropping it unregisters the ops). pt2_compliant_tag: what custom_op gives its ops
    (dynamo's check for operators it may put in a graph)."""
    library = define("DEF", SCHEMAS, (("load_tiles", load_tiles_impl, load_tiles_fake),))
    load_tiles_autograd = not_differentiable("load_tiles", "tensor", load_tiles_impl)
    library.impl("load_tiles", load_tiles_autograd, "Autograd", with_keyset=True)
    return library


LIBRARY = register()
load_tiles = torch.ops.tmakit.load_tiles.default


__all__ = [
    "copy_kwargs",
    "load_tiles",
]
# Each family's ops: importing its op module registers them, its `__all__` names them here.
_family_ops = {name: getattr(module, name) for module in registry.parts("op") for name in module.__all__}
globals().update(_family_ops)
__all__ += list(_family_ops)
del _family_ops
