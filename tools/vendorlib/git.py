"""The one way the vendoring code runs git: in a given tree, never an enclosing one."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from .errors import VendorError
from .proc import captured

#: Who and when for the commits the vendoring code makes: reproducible histories.
VENDOR_IDENTITY = {
    "GIT_AUTHOR_NAME": "speculators-kimi vendor",
    "GIT_AUTHOR_EMAIL": "vendor@speculators-kimi.invalid",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "speculators-kimi vendor",
    "GIT_COMMITTER_EMAIL": "vendor@speculators-kimi.invalid",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}

#: For the commands whose output is the units' bytes (am, format-patch): no user or
#: system configuration (prefixes, context, signatures, Message-Id, whitespace fixes).
NO_USER_CONFIG = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def git_env(tree: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment for git in ``tree``, plus ``env``: no enclosing
    repository is ever discovered, and a commit always has an identity."""
    out = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tree.resolve().parent)}
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        out.pop(var, None)
    for var, value in VENDOR_IDENTITY.items():
        if "DATE" not in var:
            out.setdefault(var, value)
    return {**out, **(env or {})}


def git(
    tree: Path, *args: str, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """``git ARGS`` in ``tree``, output captured; ``check``: a failure raises a
    :class:`VendorError` with git's own message."""
    try:
        proc = captured(
            ["git", "-c", "core.quotepath=off", "-c", "commit.gpgsign=false", *args],
            cwd=tree,
            env=git_env(tree, env),
        )
    except FileNotFoundError as err:
        raise VendorError("`git` is needed for the patch units; install git") from err
    if check and proc.returncode != 0:
        raise VendorError(
            f"git {' '.join(args)} failed in {tree}:\n{proc.stdout}{proc.stderr}"
        )
    return proc
