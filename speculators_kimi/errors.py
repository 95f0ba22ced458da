"""The one error type of a command's bad input, reported as one line.

A mistake in what a command was given (a flag, a path, a file's content) is an
answer for the user, not a bug: ``speculators-kimi`` prints ``error: <message>``
and exits 1, as upstream's commands report their known errors (unit 0012's
``run_cli``, which also reports upstream's own). ``SPECULATORS_TRACEBACK=1``
shows the traceback instead. Raise a subclass of :class:`CommandError`; the
commands never catch it themselves.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CommandError", "MissingInputError", "local_directory"]


class CommandError(ValueError):
    """A command's input cannot work; the message names it and the fix."""


class MissingInputError(CommandError, FileNotFoundError):
    """A path a command needs does not exist (or is not what it must be)."""


def local_directory(path: str | Path, flag: str, what: str) -> Path:
    """``path`` when it is a local directory; else the error naming ``flag`` and
    ``what`` it must hold (a name that is no path was taken for a Hub id, and
    failed deep in a download).

    :raises MissingInputError: ``path`` is no directory.
    """
    found = Path(path).expanduser()
    if not found.is_dir():
        raise MissingInputError(f"{flag} {path}: no such directory; pass {what}")
    return found
