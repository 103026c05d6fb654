"""Many tensors, one launch: `copy_many_`, `pack`, `unpack_` and `GroupedCopy` (a list of pairs
prepared once), a chunk table walked by a ring of bulk copies, torch's copies for the pairs it does
not group.

    plan     ManyPlan (the chunk table, its steps), pack_offsets, pairs_disjoint
    kernel   ManyKernel: the stages of a chunk table, a bulk copy in and out per chunk
    launch   compile_many and the launcher around it
    call     how a list of pairs is copied: its route, what a kept route is found and checked by
    kept     pack and unpack_ of a list packed before: its table kept relative to the buffer
    api      the public functions
    op       torch.ops.tmakit.copy_many_, pack, unpack_
    bench    the many-tensors study against torch's foreach, cat and split copies
    explain  `tmakit plan`/`explain --kernel many --many SIZES`
"""

from ..registry import FamilyRecord

FAMILY = FamilyRecord(
    name="many",
    summary="many tensors copied, packed or unpacked in one launch",
    parts=frozenset({"plan", "kernel", "launch", "api", "op", "bench", "explain"}),
)
