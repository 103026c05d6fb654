"""Many tensors, one launch, as torch operators (registered when `tmakit.ops` is imported):

    torch.ops.tmakit.copy_many_(dsts, srcs, *, grouped=True, sms=None, strict=True) -> None
    torch.ops.tmakit.pack(tensors, *, grouped=True, sms=None, strict=True) -> Tensor
    torch.ops.tmakit.pack.out(tensors, *, out, grouped=True, sms=None, strict=True) -> None
    torch.ops.tmakit.unpack_(flat, tensors, *, grouped=True, sms=None, strict=True) -> None

(pack's offsets: `tmakit.many.plan.pack_offsets`.) Each in a fragment of the `tmakit` library
with a fake implementation (also its Meta kernel), so `torch.compile` and `torch.export` trace
them; each runs `tmakit.api`'s function with the options given, strict by default, as every tmakit
op (`tmakit.ops`): TMA on a Hopper GPU, TmaConfigError for a tensor off a CUDA device (eagerly and
while tracing) or a pair TMA does not serve; `strict=False` is the function's call, torch's
`_foreach_copy_` for those pairs and on any device (what `tmakit.copy_many_`, `pack` and `unpack_`
record while torch.compile traces them). Not differentiable: inputs that require grad while grad
mode is on are refused."""

from __future__ import annotations

import torch

from ..errors import TmaConfigError
from ..ops_base import NAMESPACE, STRICT, check_traced, define, op_options, refuse_grad
from . import api as api_many
from . import call as api_many_route

# The options every op of lists takes, as the functions do.
MANY_MODE = f"bool grouped=True, int? sms=None, {STRICT}"
SCHEMAS = {
    "copy_many_": f"copy_many_(Tensor(a!)[] dsts, Tensor[] srcs, *, {MANY_MODE}) -> ()",
    "pack": f"pack(Tensor[] tensors, *, {MANY_MODE}) -> Tensor",
    "pack.out": f"pack.out(Tensor[] tensors, *, Tensor(a!) out, {MANY_MODE}) -> ()",
    "unpack_": f"unpack_(Tensor flat, Tensor(a!)[] tensors, *, {MANY_MODE}) -> ()",
}


def copy_many__impl(dsts: list[torch.Tensor], srcs: list[torch.Tensor], **options: bool) -> None:
    refuse_grad("copy_many_", *dsts, *srcs)
    if options.get("strict", True):
        on_gpus("copy_many_", "dsts", dsts)
        on_gpus("copy_many_", "srcs", srcs)
    api_many.copy_many_(dsts, srcs, **op_options(options))


def on_gpus(op: str, name: str, tensors: list[torch.Tensor]) -> None:
    """Each of `tensors` (`name[i]` in the message) on a CUDA device (`ops_base.check_traced`)."""
    for i, tensor in enumerate(tensors):
        check_traced(op, **{f"{name}[{i}]": tensor})


def copy_many__fake(dsts: list[torch.Tensor], srcs: list[torch.Tensor], **options: bool) -> None:
    if options.get("strict", True):
        on_gpus("copy_many_", "dsts", dsts)
        on_gpus("copy_many_", "srcs", srcs)
    if len(dsts) != len(srcs):
        raise TmaConfigError(
            f"torch.ops.{NAMESPACE}.copy_many_ got {len(dsts)} destinations and {len(srcs)} sources"
        )


def pack_impl(tensors: list[torch.Tensor], **options: bool) -> torch.Tensor:
    refuse_grad("pack", *tensors)
    if options.get("strict", True):
        on_gpus("pack", "tensors", tensors)
    return api_many.pack(tensors, **op_options(options))[0]


def pack_out_impl(tensors: list[torch.Tensor], *, out: torch.Tensor, **options: bool) -> None:
    refuse_grad("pack", out, *tensors)
    if options.get("strict", True):
        on_gpus("pack", "tensors", tensors)
        check_traced("pack", out=out)
    api_many.pack(tensors, out, **op_options(options))


def pack_fake(tensors: list[torch.Tensor], **options: bool) -> torch.Tensor:
    if options.get("strict", True):
        on_gpus("pack", "tensors", tensors)
    if not tensors:
        raise TmaConfigError(f"torch.ops.{NAMESPACE}.pack got no tensors")
    dtype, _, length = api_many_route.packed_layout(torch, tensors)
    return tensors[0].new_empty((length,), dtype=dtype)


def pack_out_fake(tensors: list[torch.Tensor], *, out: torch.Tensor, **options: bool) -> None:
    packed = pack_fake(tensors, **options)
    if out.dim() != 1 or out.dtype != packed.dtype or out.device != packed.device:
        raise TmaConfigError(
            f"torch.ops.{NAMESPACE}.pack: out is {tuple(out.shape)} {out.dtype} on {out.device}; it takes "
            f"a 1-D {packed.dtype} buffer of at least {packed.shape[0]} elements on {packed.device}"
        )
    torch._check(out.shape[0] >= packed.shape[0])  # a guard where the lengths are symbolic


def unpack__impl(flat: torch.Tensor, tensors: list[torch.Tensor], **options: bool) -> None:
    refuse_grad("unpack_", flat, *tensors)
    if options.get("strict", True):
        check_traced("unpack_", flat=flat)
        on_gpus("unpack_", "tensors", tensors)
    api_many.unpack_(flat, tensors, **op_options(options))


def unpack__fake(flat: torch.Tensor, tensors: list[torch.Tensor], **options: bool) -> None:
    if options.get("strict", True):
        check_traced("unpack_", flat=flat)
        on_gpus("unpack_", "tensors", tensors)
    if flat.dim() != 1:
        raise TmaConfigError(f"torch.ops.{NAMESPACE}.unpack_: the buffer is {tuple(flat.shape)}; it is 1-D")


LIBRARY = define(
    SCHEMAS,
    (
        ("copy_many_", copy_many__impl, copy_many__fake),
        ("pack", pack_impl, pack_fake),
        ("pack.out", pack_out_impl, pack_out_fake),
        ("unpack_", unpack__impl, unpack__fake),
    ),
)
copy_many_ = torch.ops.tmakit.copy_many_.default
pack = torch.ops.tmakit.pack.default
unpack_ = torch.ops.tmakit.unpack_.default

__all__ = ["copy_many_", "pack", "unpack_"]
