"""The `tmakit` command: parse, check every argument, call the library, print.

It behaves as ruff, pytest, pip and git do: results on stdout, every error on stderr as one line
`tmakit: ...`; exit 0 on success, 1 when a check finds a problem, 2 for bad usage (and for a
command that needs a Hopper GPU where there is none). Every argument is checked, and every plan
built, before a GPU is looked for or a line is printed. `--json [PATH]` writes a command's result
as JSON to PATH, or prints it instead of the text.

Each command is a module of this package that adds its options to its subparser
(`add_arguments`) and runs it (`run`); `COMMANDS` lists them, each with the line `--help` shows.
What they share is in `args`, and what `plan` and `explain` share (`--kernel` and the plans it
makes) in `kernels`.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from typing import Any, NoReturn

from .. import __version__
from ..errors import TmaConfigError
from ..runtime.compile import installed_dsl_version
from . import bench, check, demo, explain, lint, plan, verify
from .args import CommandError

# The subcommands in the order --help lists them, each with its line there.
COMMANDS = {
    "plan": (plan, "the seed's arithmetic for a configuration (no GPU)"),
    "demo": (demo, "run and verify the seed's kernel (or compile it, without a GPU)"),
    "verify": (verify, "verify loads on the GPU: one configuration or a sweep"),
    "explain": (explain, "the seed's three questions answered from the real CuTe objects (no GPU)"),
    "check": (check, "replay a barrier schedule on the CPU model: hangs, races, parity (no GPU)"),
    "bench": (bench, "device time vs the hardware peak and torch, same run (GPU)"),
    "lint": (
        lint,
        "tmakit's kernels compiled and their barriers' bytes, fences and store groups checked (no GPU)",
    ),
}
BROKEN_PIPE_EXIT = 141  # 128 + SIGPIPE: what a shell reports for a tool whose reader went away
INTERRUPTED_EXIT = 130  # 128 + SIGINT


_UNSET = object()  # an option's value before the command line is read: still there, not given
# The actions whose value is set whole (an append or a count reads the value before it).
_SET_WHOLE = (argparse._StoreAction, argparse._StoreConstAction)
# A word that starts with a minus and a digit ("-5x10", "-64x256") is a value, a bad one the
# flag's own check names: no tmakit flag starts with a digit (argparse takes only "-5" as a value).
_NEGATIVE_VALUE = re.compile(r"-\d")


def _nearest(word: str, choices: Any) -> str:
    """ "; did you mean X?" for the choice nearest `word` (difflib's), or "" where none is near.
    Flags are compared without their dashes, which every flag shares (--nope is not near --moe)."""
    names = {str(choice).lstrip("-"): str(choice) for choice in choices}
    near = difflib.get_close_matches(word.lstrip("-"), list(names), n=1)
    return f"; did you mean {names[near[0]]}?" if near else ""


class _Parser(argparse.ArgumentParser):
    """argparse's usage errors as one line on stderr, as every other tmakit error; and the options
    a command line named, in `args.given` (their dests), so that a command refuses a flag that
    does not apply to its run instead of ignoring it."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"tmakit: {message} (see '{self.prog} --help')\n")

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        """argparse's, but what no option took is refused by the command that was given it: a
        misspelt flag with the command's flag nearest it, pointing at that command's --help."""
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            command = self._commands().get(getattr(namespace, "command", None), self)
            flag = extras[0].partition("=")[0]
            if flag.startswith("-"):
                flags = [*command._option_string_actions, *self._option_string_actions]
                command.error(f"unknown flag {flag}{_nearest(flag, flags)}")
            command.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace

    def _commands(self) -> dict[str, argparse.ArgumentParser]:
        """Each subcommand's parser, by name (none for a subcommand's own parser)."""
        found = [action for action in self._actions if isinstance(action, argparse._SubParsersAction)]
        return dict(found[0].choices) if found else {}

    def _parse_optional(self, arg_string: str) -> Any:
        if _NEGATIVE_VALUE.match(arg_string):  # "--shape -5x10": the value, for --shape to refuse
            return None
        return super()._parse_optional(arg_string)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """argparse's, with the nearest choice to a misspelt one (`--kernel copyy`)."""
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as error:
            raise argparse.ArgumentError(
                action, f"{error.message}{_nearest(str(value), action.choices)}"
            ) from None

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        namespace = argparse.Namespace() if namespace is None else namespace
        marked = [
            action
            for action in self._actions
            if isinstance(action, _SET_WHOLE)
            and action.default is not argparse.SUPPRESS
            and not hasattr(namespace, action.dest)
        ]
        for action in marked:
            setattr(namespace, action.dest, _UNSET)
        namespace, extras = super().parse_known_args(args, namespace)
        given = set(getattr(namespace, "given", ()))
        for action in marked:
            if getattr(namespace, action.dest) is not _UNSET:
                given.add(action.dest)
            elif isinstance(action.default, str):  # as argparse does: a text default through its type
                setattr(namespace, action.dest, self._get_value(action, action.default))
            else:
                setattr(namespace, action.dest, action.default)
        given.update(
            action.dest
            for action in self._actions
            if not isinstance(action, _SET_WHOLE)
            and getattr(namespace, action.dest, None) not in (None, 0, False)
            and action.default is not argparse.SUPPRESS
        )
        namespace.given = given
        return namespace, extras


class _Version(argparse.Action):
    """`--version`: looked up only when asked (finding the DSL may import it)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print tmakit's and the DSL's versions and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> NoReturn:
        dsl = installed_dsl_version() or "not installed"
        print(f"tmakit {__version__} (nvidia-cutlass-dsl {dsl})")  # on stdout, as --help
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tmakit",
        description="Hopper TMA tile loads, pipelines and copies in CuTe DSL: planned, explained, "
        "verified, timed.",
        epilog="'The seed' is the TMA load kernel tmakit grew out of, from the walkthrough 'Understanding "
        "TMA loads in CuTe DSL': an 8448x1792 fp16 tensor in 64x256 tiles, one block per strip of rows, "
        "one stage (docs/seed.md); its configuration is every command's default. "
        "Exit status: 0 success, 1 a check found a problem, 2 bad usage (or no Hopper GPU for "
        "verify and bench).",
    )
    parser.add_argument("--version", action=_Version)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (command, summary) in COMMANDS.items():  # each a _Parser too: of the parser's class
        command_parser = subparsers.add_parser(name, help=summary)
        command.add_arguments(command_parser)
        command_parser.set_defaults(run=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help, --version, or a usage error already reported
        return done.code if isinstance(done.code, int) else 2
    try:
        code = args.run(args)
        sys.stdout.flush()  # a reader that went away shows here, not at interpreter exit
    except BrokenPipeError:  # `tmakit plan | head -1`: stop quietly, as other Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE_EXIT
    except KeyboardInterrupt:
        return INTERRUPTED_EXIT
    except (TmaConfigError, ValueError, CommandError) as error:
        print(f"tmakit: {error}", file=sys.stderr)
        return 2
    except (MemoryError, RuntimeError) as error:  # torch's OutOfMemoryError is a RuntimeError
        if not isinstance(error, MemoryError) and type(error).__name__ != "OutOfMemoryError":
            raise
        detail = (str(error).strip().splitlines() or [type(error).__name__])[0]
        print(
            f"tmakit: out of memory ({detail}): ask for less (smaller --sizes, fewer cases)", file=sys.stderr
        )
        return 2
    return code
