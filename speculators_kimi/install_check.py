"""Detect upstream's own `speculators` distribution installed beside ours.

Both distributions write the same top-level `speculators` package, so whichever
was installed last silently owns (or half-owns) those files.
"""

from __future__ import annotations

import importlib.metadata
import warnings

DIST_NAME = "speculators-kimi"
UPSTREAM_DIST = "speculators"

_warned = False


class UpstreamConflictWarning(UserWarning):
    """Upstream `speculators` and `speculators-kimi` are installed together."""


def upstream_distribution_version() -> str | None:
    """Version of upstream's own `speculators` distribution, if one is installed."""
    try:
        return importlib.metadata.version(UPSTREAM_DIST)
    except importlib.metadata.PackageNotFoundError:
        return None


def conflict_message(upstream_version: str) -> str:
    return (
        f"Both upstream `speculators` {upstream_version} and `{DIST_NAME}` are "
        "installed in this environment. They ship the same `speculators` package, so "
        "the files are whichever was installed last (possibly a mix), and the "
        "nested-verifier patches may be missing. Fix:\n"
        f"    pip uninstall -y {UPSTREAM_DIST}\n"
        f"    pip install --force-reinstall --no-deps {DIST_NAME}\n"
        "(from a clone: `pip install --force-reinstall --no-deps .`)"
    )


def warn_if_upstream_installed() -> bool:
    """Warn once per process if upstream's distribution is present; True if so."""
    global _warned
    version = upstream_distribution_version()
    if version is None:
        return False
    if not _warned:
        _warned = True
        warnings.warn(conflict_message(version), UpstreamConflictWarning, stacklevel=3)
    return True
