"""tmakit's torch operators: the `tmakit` namespace, and each family's ops (its `op` part,
`tmakit.registry`); `import tmakit.ops` registers them.

    torch.ops.tmakit.copy_(dst, src, options="", *, strict=True) -> None; .typed(...) (`tmakit.copies.op`)
    torch.ops.tmakit.copy(src, options="", *, strict=True) -> Tensor; .typed(...) (`tmakit.copies.op`)
    torch.ops.tmakit.reduce_into_(dst, src, op="add", *, strict=True) -> None; .typed (`tmakit.reduce.op`)
    torch.ops.tmakit.load_tiles(tensor, tile_rows=64, tile_cols=256, swizzle=0) -> Tensor (`tmakit.load.op`)
    torch.ops.tmakit.im2col(x, kernel, stride=1, padding=0, dilation=1, *, ...) -> Tensor; .out
        (`tmakit.patches.op`)
    torch.ops.tmakit.gather_rows (.out), scatter_rows_, index_add_, index_reduce_ (`tmakit.rows.op`)
    torch.ops.tmakit.copy_many_, pack (.out), unpack_ (`tmakit.many.op`)
    torch.ops.tmakit.moe_permute, moe_permute_fp8, moe_combine, moe_combine_grad (`tmakit.moe.op`)

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

What every op module shares (the library, the checks of tensors without memory, the device guard,
the copy's options as schema arguments, the Autograd kernel of an op without a gradient) is in
`tmakit.ops_base`.

One rule for every op, these and the families' alike: an op is strict unless called with
`strict=False` (a keyword-only schema argument, `ops_base.STRICT`; `load_tiles`, TMA's loads
alone as its function, has none). Strict, it runs its `tmakit`
function with `strict=True`, on torch's current stream and under the tensor's GPU's guard, so it
serves a call by TMA on a Hopper GPU and refuses with `TmaConfigError` anything TMA does not serve;
its fake refuses while tracing what it can tell without memory, and a tensor off a CUDA device
(CPU, meta) is refused eagerly and while tracing. With `strict=False` it runs the function's own
call, torch's op where TMA does not serve and on any device, and its fake gives what the function
returns: what the functions (`tmakit.copy_`, `tmakit.gather_rows`, ...) hand their calls to while
torch.compile or torch.export traces them (docs/api.md, "torch ops"; the moe ops take `strict`,
False by default, always). This module imports torch; `import tmakit` does not."""

from __future__ import annotations

import torch

from . import registry
from .ops_base import NAMESPACE, copy_kwargs

# The namespace, defined once; each family's op module adds its ops to it as a fragment.
LIBRARY = torch.library.Library(NAMESPACE, "DEF")

__all__ = [
    "copy_kwargs",
]
# Each family's ops: importing its op module registers them, its `__all__` names them here.
_family_ops = {name: getattr(module, name) for module in registry.parts("op") for name in module.__all__}
globals().update(_family_ops)
__all__ += list(_family_ops)
del _family_ops
