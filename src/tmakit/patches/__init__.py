"""im2col: `im2col` and `im2col_path`, the patch matrix of a 2-D convolution over an NHWC
activation gathered by TMA im2col loads (narrow channels: the zero-padded input's overlapping
windows copied by TMA; a 1x1 patch matrix too small for the atom: x's rows copied), torch's
expression of the same matrix where TMA cannot serve (`im2col_path` says which and why).

    plan     Im2colPlan (the patch matrix's boxes on the copy's ring), Im2colConv, Im2colWindows
             and the rules of the im2col tensor map and CuTe's atom, each refused before compiling
    route    which path serves a call, and why: its facts, the rule, where its tensors lie
    kernel   Im2colKernel: the copy with im2col loads; make_im2col_load_atom for a ring of one's own
    launch   compile_im2col and the launcher around it
    model    which input element each element of a box reads, and the patch matrix, in NumPy
    api      the public functions (and `Im2colPlan`, which `tmakit` exports)
    op       torch.ops.tmakit.im2col
    bench    the im2col study against torch's unfold + permute; its cases of the drop-in study
    explain  `tmakit plan`/`explain --kernel im2col --im2col SPEC` (explain: `--im2col` alone too)

The package is `tmakit.patches` (the patch matrix it makes), not `tmakit.im2col`: that name is the
function's, on `tmakit`, as `tmakit.copy` is the copy's (its family `tmakit.copies`).
"""

from ..registry import FamilyRecord

FAMILY = FamilyRecord(
    name="im2col",
    summary="the patch matrix of a 2-D convolution, by TMA im2col loads",
    parts=frozenset({"plan", "kernel", "launch", "model", "api", "op", "bench", "explain"}),
)
