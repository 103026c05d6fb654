"""`tmakit plan` and `tmakit explain` of a reduce: `--kernel reduce --reduce OP`, the plan
`reduce_into_` makes on an H200 for the --shape tensor (the copy's, with `--copy`'s options but
as_rows and bulk, whose stores reduce) and, explained, the seed's questions on its ring with the
reduce store of the tile. `--reduce` itself is the core's: on the plain load, `explain --reduce OP`
walks the seed's tile through a reduce store (`explain.reduce_store`)."""

from __future__ import annotations

import argparse

from ..cli.args import CommandError, emit
from ..cli.kernels import call_copy, call_options, explain_call, refuse_call_flags
from .plan import ReducePlan

KERNELS = ("reduce",)  # the --kernel names this family plans and explains
FLAGS = ()  # --reduce is read by the core's load explain too: no option is only this family's
WHAT = "reduce_into_ with --reduce OP"  # what --kernel reduce plans, for the help


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """None of its own: `--reduce OP` and `--copy` are the core's (`cli.kernels.add_kernel_arguments`)."""


def reduce_plan(args: argparse.Namespace) -> tuple[ReducePlan, str]:
    """`--kernel reduce --reduce OP`: the reduce `reduce_into_` plans on an H200 with `--copy`'s
    options (a copy's but as_rows and bulk: a reduce stores through the tensors' own tensor maps),
    and its head line (`cli.kernels.call_copy`)."""
    refuse_call_flags(args)
    if args.reduce is None:
        raise CommandError("--kernel reduce plans a reduce store: give --reduce OP (add, max, ...)")
    options = call_options(args)
    if options.as_rows or options.bulk:
        raise CommandError("--kernel reduce: a reduce takes the copy's options but as_rows and bulk")
    copy, head = call_copy(args, options)
    return ReducePlan(copy, args.reduce), head


def plan(args: argparse.Namespace) -> int:
    """`plan --kernel reduce --reduce OP`: the head line and the plan's summary."""
    reduce, head = reduce_plan(args)
    summary = [head, *reduce.summary().splitlines()]
    emit(args, {"kernel": {"kind": args.kernel, "summary": summary}}, "\n".join(summary))
    return 0


def explain(args: argparse.Namespace) -> int:
    """`explain --kernel reduce --reduce OP`: the plan, then the seed's questions on block 0 of the
    copy's ring and the reduce store of its tile."""
    reduce, head = reduce_plan(args)
    return explain_call(args, reduce.copy, reduce.summary(), head)
