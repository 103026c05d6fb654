"""`tmakit.lint`: the TMA data movement of a CuTe DSL function checked from its compiled PTX, the
DSL's MLIR module and the element types of its tensors (compiled for sm_90a, on any machine). A
tool over the core: no family of its own.

    program  the PTX read as a program: instructions, blocks, graph, register values (pure)
    mlir     the atoms and launch facts of the DSL's MLIR module (pure)
    checks   the checks, and `lint_text`: lint captured text (pure)
    report   `LintReport`, `Finding`: what the checks found and how much they proved (pure)
    capture  `lint`: compile a function with its PTX and MLIR kept, then lint them
    kernels  tmakit's own kernel variants, each as `tmakit lint --kernel` compiles it
"""

from .capture import Captured, capture, lint
from .checks import lint_text
from .report import CHECKS, Finding, LintReport, Tally, Unchecked

__all__ = [
    "CHECKS",
    "Captured",
    "Finding",
    "LintReport",
    "Tally",
    "Unchecked",
    "capture",
    "lint",
    "lint_text",
]
