"""A wall-clock limit on a call made in this process: how the CLI tests tell a bounded command
from one whose work grows with a flag's value."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


class TookTooLong(Exception):
    """The call was still running when its time ran out."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """TookTooLong raised in the call once `seconds` have passed (SIGALRM: pytest, and each
    pytest-xdist worker, runs a test in its main thread)."""

    def expire(signum, frame):
        raise TookTooLong(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
