"""Our commands in a pipe: closing the reader of their output ends them quietly.

`speculators-kimi --version | grep -q 0.9.0`: grep exits at its first match, and
the next write to stdout, or the flush at exit, raises `BrokenPipeError` (Python
ignores SIGPIPE), which Python prints as a traceback. A Unix tool dies of SIGPIPE
silently instead. :func:`quiet_when_reader_closes` does for a console entry point
what the Python docs recommend (the `signal` module's "Note on SIGPIPE"): stdout
pointed at devnull, so that no later flush fails again, and the exit status a shell
reports for a tool that SIGPIPE ended. A `BrokenPipeError` of any other pipe or
socket (stdout's reader still there) stays an error.
"""

from __future__ import annotations

import functools
import os
import select
import signal
import sys
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

#: What a shell reports for a command that SIGPIPE ended (128 + 13).
EXIT_STATUS = 128 + signal.SIGPIPE


def quiet_when_reader_closes(main: Callable[P, R]) -> Callable[P, R | int]:
    """``main``, ending with :data:`EXIT_STATUS` and no traceback when the reader
    of stdout has gone."""

    @functools.wraps(main)
    def run(*args: P.args, **kwargs: P.kwargs) -> R | int:
        try:
            status = main(*args, **kwargs)
        except SystemExit:  # argparse's --help, upstream's Typer app
            if _reader_gone_on_flush():
                raise SystemExit(EXIT_STATUS) from None
            raise
        except BrokenPipeError:
            if not _stdout_reader_gone():
                raise
            _stdout_to_devnull()
            return EXIT_STATUS
        return EXIT_STATUS if _reader_gone_on_flush() else status

    return run


def _stdout_fd() -> int | None:
    try:
        return sys.__stdout__.fileno() if sys.__stdout__ is not None else None
    except (AttributeError, OSError, ValueError):  # replaced, or closed
        return None


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reading end is closed (Linux reports
    POLLERR on such a pipe's writing end)."""
    fd = _stdout_fd()
    if fd is None:
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def _stdout_to_devnull() -> None:
    """The Python docs' recipe: later writes and flushes of stdout (the one at
    interpreter exit included) go to devnull instead of failing again."""
    fd = _stdout_fd()
    if fd is None:
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def _reader_gone_on_flush() -> bool:
    """Flush what stdout holds; True (stdout then devnull) if its reader has gone."""
    try:
        for stream in (sys.stdout, sys.__stdout__):
            if stream is not None:
                stream.flush()
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise
        _stdout_to_devnull()
        return True
    return False
