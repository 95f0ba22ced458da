"""The patch series as git history, and back.

`materialize_git` commits upstream as the first commit and one commit per unit
(subject = unit name). `export` turns such a history back into `upstream_patches/`:
files a commit adds go to `files/`, changes to existing files to `changes.patch`.
Both are deterministic, so materialize followed by export is byte-for-byte stable.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from .errors import VendorError
from .pin import Unit, load_pin, load_series, patches_dir
from .units import apply_unit, checked_git, git_env, run_git

BASE_SUBJECT_PREFIX = "upstream: "
_FIXED_DATE = "2000-01-01T00:00:00+0000"

PR_TEMPLATE = """# {name}

## Problem

## Change

## Tests

## Risk
"""


def git(tree: Path, *args: str, check: bool = True) -> str:
    """Run git in ``tree`` with fixed dates (reproducible commits); return stdout."""
    dates = {"GIT_AUTHOR_DATE": _FIXED_DATE, "GIT_COMMITTER_DATE": _FIXED_DATE}
    if check:
        return checked_git(tree, *args, env=dates)
    return run_git(tree, *args, env=dates).stdout


def commit_all(tree: Path, message: str) -> None:
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "--allow-empty", "-m", message)


def init_repo(tree: Path, base_subject: str) -> None:
    git(tree, "init", "-q", "-b", "main")
    commit_all(tree, base_subject)


def materialize_git(root: Path, tree: Path, units: list[Unit] | None = None) -> None:
    """Make ``tree`` (already holding the extracted sdist) a git history of units."""
    pin = load_pin(root)
    init_repo(tree, f"{BASE_SUBJECT_PREFIX}{pin.name} {pin.version}")
    for unit in load_series(root) if units is None else units:
        apply_unit(unit, tree)
        commit_all(tree, unit.name)


def unit_commits(tree: Path) -> list[tuple[str, str]]:
    """(sha, subject) of each unit commit above the upstream base commit."""
    log = git(tree, "log", "--reverse", "--format=%H %s", "HEAD").splitlines()
    if not log or not log[0].split(" ", 1)[1].startswith(BASE_SUBJECT_PREFIX):
        raise VendorError(
            f"{tree}: the first commit must be the upstream tree "
            f"(subject starting {BASE_SUBJECT_PREFIX!r}); make it with "
            "`tools/vendor materialize --git DIR`"
        )
    out = []
    for line in log[1:]:
        sha, subject = line.split(" ", 1)
        if "/" in subject or subject.startswith(".") or " " in subject.strip():
            raise VendorError(
                f"{tree}: commit {sha[:12]} subject {subject!r} is not a unit name; "
                "each commit's subject must be its unit directory name "
                "(e.g. 0002-nested-config); squash fixups into their unit first"
            )
        out.append((sha, subject.strip()))
    return out


def unit_diff(tree: Path, sha: str) -> tuple[dict[str, bytes], str]:
    """New files (path -> bytes) and the patch of changed files for one commit."""
    status = git(tree, "diff", "--no-renames", "--name-status", f"{sha}^", sha)
    added: dict[str, bytes] = {}
    changed: list[str] = []
    for line in status.splitlines():
        kind, path = line.split("\t", 1)
        if kind == "A":
            blob = subprocess.run(
                ["git", "show", f"{sha}:{path}"],
                cwd=tree,
                env=git_env(tree),
                capture_output=True,
                check=True,
            ).stdout
            added[path] = blob
        else:
            changed.append(path)
    patch = ""
    if changed:
        patch = git(
            tree,
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--no-renames",
            "--full-index",
            "--src-prefix=a/",
            "--dst-prefix=b/",
            f"{sha}^",
            sha,
            "--",
            *changed,
        )
    return added, patch


def export(root: Path, tree: Path) -> list[str]:
    """Rewrite `upstream_patches/` (units and series) from the history in ``tree``."""
    pdir = patches_dir(root)
    commits = unit_commits(tree)
    names = [name for _, name in commits]
    if len(set(names)) != len(names):
        raise VendorError(f"{tree}: two commits carry the same unit name: {names}")
    for sha, name in commits:
        added, patch = unit_diff(tree, sha)
        unit_dir = pdir / name
        unit_dir.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(unit_dir / "files", ignore_errors=True)
        for rel, blob in sorted(added.items()):
            dest = unit_dir / "files" / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(blob)
        patch_file = unit_dir / "changes.patch"
        if patch:
            patch_file.write_text(patch)
        else:
            patch_file.unlink(missing_ok=True)
        pr = unit_dir / "PR.md"
        if not pr.exists():
            pr.write_text(PR_TEMPLATE.format(name=name))
    (pdir / "series").write_text("".join(f"{n}\n" for n in names))
    return names
