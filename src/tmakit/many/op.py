"""Many tensors, one launch, as torch operators (registered when `tmakit.ops` is imported):

    torch.ops.tmakit.copy_many_(dsts, srcs) -> None
    torch.ops.tmakit.pack(tensors) -> Tensor      (offsets: `tmakit.many.plan.pack_offsets`)
    torch.ops.tmakit.unpack_(flat, tensors) -> None

Each in a fragment of the `tmakit` library with a fake implementation (also its Meta kernel), so
`torch.compile` and `torch.export` trace them; each runs `tmakit.api`'s function strictly, as
every tmakit op does (`tmakit.ops`): TMA on a Hopper GPU, TmaConfigError for a tensor off a
CUDA device (eagerly and while tracing) or a pair TMA does not serve. Not differentiable: inputs
that require grad while grad mode is on are refused."""

from __future__ import annotations

import torch

from ..errors import TmaConfigError
from ..ops_base import NAMESPACE, check_traced, define, op_strict, refuse_grad
from . import api as api_many
from . import call as api_many_route

SCHEMAS = {
    "copy_many_": "copy_many_(Tensor(a!)[] dsts, Tensor[] srcs) -> ()",
    "pack": "pack(Tensor[] tensors) -> Tensor",
    "unpack_": "unpack_(Tensor flat, Tensor(a!)[] tensors) -> ()",
}


def copy_many__impl(dsts: list[torch.Tensor], srcs: list[torch.Tensor]) -> None:
    refuse_grad("copy_many_", *dsts, *srcs)
    on_gpus("copy_many_", "dsts", dsts)
    on_gpus("copy_many_", "srcs", srcs)
    api_many.copy_many_(dsts, srcs, strict=op_strict())


def on_gpus(op: str, name: str, tensors: list[torch.Tensor]) -> None:
    """Each of `tensors` (`name[i]` in the message) on a CUDA device (`ops_base.check_traced`)."""
    for i, tensor in enumerate(tensors):
        check_traced(op, **{f"{name}[{i}]": tensor})


def copy_many__fake(dsts: list[torch.Tensor], srcs: list[torch.Tensor]) -> None:
    on_gpus("copy_many_", "dsts", dsts)
    on_gpus("copy_many_", "srcs", srcs)
    if len(dsts) != len(srcs):
        raise TmaConfigError(
            f"torch.ops.{NAMESPACE}.copy_many_ got {len(dsts)} destinations and {len(srcs)} sources"
        )


def pack_impl(tensors: list[torch.Tensor]) -> torch.Tensor:
    refuse_grad("pack", *tensors)
    on_gpus("pack", "tensors", tensors)
    return api_many.pack(tensors, strict=op_strict())[0]


def pack_fake(tensors: list[torch.Tensor]) -> torch.Tensor:
    on_gpus("pack", "tensors", tensors)
    if not tensors:
        raise TmaConfigError(f"torch.ops.{NAMESPACE}.pack got no tensors")
    dtype, _, length = api_many_route.packed_layout(torch, tensors)
    return tensors[0].new_empty((length,), dtype=dtype)


def unpack__impl(flat: torch.Tensor, tensors: list[torch.Tensor]) -> None:
    refuse_grad("unpack_", flat, *tensors)
    check_traced("unpack_", flat=flat)
    on_gpus("unpack_", "tensors", tensors)
    api_many.unpack_(flat, tensors, strict=op_strict())


def unpack__fake(flat: torch.Tensor, tensors: list[torch.Tensor]) -> None:
    check_traced("unpack_", flat=flat)
    on_gpus("unpack_", "tensors", tensors)
    if flat.dim() != 1:
        raise TmaConfigError(f"torch.ops.{NAMESPACE}.unpack_: the buffer is {tuple(flat.shape)}; it is 1-D")


LIBRARY = define(
    SCHEMAS,
    (
        ("copy_many_", copy_many__impl, copy_many__fake),
        ("pack", pack_impl, pack_fake),
        ("unpack_", unpack__impl, unpack__fake),
    ),
)
copy_many_ = torch.ops.tmakit.copy_many_.default
pack = torch.ops.tmakit.pack.default
unpack_ = torch.ops.tmakit.unpack_.default

__all__ = ["copy_many_", "pack", "unpack_"]
