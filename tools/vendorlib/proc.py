"""Child processes the vendoring code runs: text output captured, exit status left
to the caller (who turns a failure into a :class:`~.errors.VendorError` that says
what to fix)."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["captured"]


def captured(
    cmd: Sequence[str | Path],
    *,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` to its end with stdout and stderr captured as text; never raises
    for a non-zero exit (``subprocess.TimeoutExpired`` still propagates).

    :param env: the child's whole environment (``None``: this process's).
    """
    return subprocess.run(
        [str(part) for part in cmd],
        cwd=cwd,
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
