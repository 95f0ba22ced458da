"""The export's one error type, apart so every step can raise it without
importing the step that runs them all."""

from __future__ import annotations

from ..errors import CommandError

__all__ = ["ExportError"]


class ExportError(CommandError):
    """The checkpoint cannot be exported as asked (the message says how to fix)."""
