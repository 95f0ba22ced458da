"""Apply patch units to an upstream tree: copy `files/`, then `git apply` the diff."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .errors import VendorError
from .pin import Unit
from .proc import captured

_FAILED = re.compile(r"patch failed: (?P<file>.+?):(?P<line>\d+)")
_HUNK = re.compile(r"^@@ -(?P<old>\d+)(?:,\d+)? \+\d+(?:,\d+)? @@.*$")
_FILE = re.compile(r"^diff --git a/(?P<a>\S+) b/(?P<b>\S+)$")


@dataclass(frozen=True)
class Hunk:
    """One hunk of a unified diff: file, 1-based index in that file, header."""

    file: str
    index: int
    count: int
    old_start: int
    header: str


def parse_hunks(patch_text: str) -> list[Hunk]:
    """Every hunk of a git diff, with its position among its file's hunks."""
    hunks: list[Hunk] = []
    current: str | None = None
    per_file: dict[str, list[tuple[int, str]]] = {}
    for line in patch_text.splitlines():
        if m := _FILE.match(line):
            current = m["b"]
            per_file.setdefault(current, [])
        elif current is not None and (m := _HUNK.match(line)):
            per_file[current].append((int(m["old"]), line))
    for file, items in per_file.items():
        for i, (old, header) in enumerate(items, start=1):
            hunks.append(Hunk(file, i, len(items), old, header))
    return hunks


def failed_hunks(
    patch_text: str, git_output: str
) -> list[tuple[str, int, Hunk | None]]:
    """(file, upstream line, hunk or None) for each `patch failed` git reported."""
    hunks = parse_hunks(patch_text)
    out: list[tuple[str, int, Hunk | None]] = []
    for m in _FAILED.finditer(git_output):
        file, old = m["file"], int(m["line"])
        match = [h for h in hunks if h.file == file and h.old_start == old]
        out.append((file, old, match[0] if match else None))
    return out


def git_env(tree: Path) -> dict[str, str]:
    """Environment for git in ``tree`` that never discovers an enclosing repository."""
    env = dict(os.environ)
    env["GIT_CEILING_DIRECTORIES"] = str(tree.resolve().parent)
    env.setdefault("GIT_AUTHOR_NAME", "speculators-kimi vendor")
    env.setdefault("GIT_AUTHOR_EMAIL", "vendor@speculators-kimi.invalid")
    env.setdefault("GIT_COMMITTER_NAME", env["GIT_AUTHOR_NAME"])
    env.setdefault("GIT_COMMITTER_EMAIL", env["GIT_AUTHOR_EMAIL"])
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        env.pop(var, None)
    return env


def run_git(
    tree: Path,
    *args: str,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run git in ``tree`` (never an enclosing repository), output captured.

    ``env`` adds to (or overrides) the variables of :func:`git_env`.
    """
    return captured(
        ["git", "-c", "core.quotepath=off", "-c", "commit.gpgsign=false", *args],
        cwd=tree,
        env={**git_env(tree), **(env or {})},
    )


def checked_git(tree: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """:func:`run_git` that raises a :class:`VendorError` on failure; stdout."""
    proc = run_git(tree, *args, env=env)
    if proc.returncode != 0:
        raise VendorError(f"git {' '.join(args)} failed in {tree}:\n{proc.stderr}")
    return proc.stdout


def explain_apply_failure(unit: Unit, stderr: str) -> str:
    """Turn `git apply` stderr into: unit, file, hunk (header and position)."""
    lines = [f"unit {unit.name}: {unit.patch} does not apply to this upstream tree"]
    for file, old, h in failed_hunks(unit.patch.read_text(), stderr):
        if h is not None:
            lines.append(
                f"  file {file}, hunk {h.index} of {h.count} "
                f"(upstream line {old}): {h.header}"
            )
        else:
            lines.append(f"  file {file}, at upstream line {old}")
    missing = re.findall(
        r"error: (\S+): (?:No such file or directory|does not exist)", stderr
    )
    lines.extend(f"  file {f}: not in the upstream tree" for f in missing)
    lines.append("git apply said:\n    " + "\n    ".join(stderr.strip().splitlines()))
    lines.append(
        "Fix: rework the unit on the current upstream "
        "(`tools/vendor materialize --git DIR`, edit, `tools/vendor export DIR`), "
        "or use `tools/vendor rebase` when moving to a new release."
    )
    return "\n".join(lines)


def apply_unit(unit: Unit, tree: Path) -> list[str]:
    """Apply one unit to ``tree``; return the upstream-relative paths it touched."""
    touched: list[str] = []
    for rel in unit.new_files():
        dest = tree / rel
        if dest.exists():
            raise VendorError(
                f"unit {unit.name}: files/{rel.as_posix()} would overwrite the "
                f"existing file {rel.as_posix()} of the upstream tree. "
                "Fix: `files/` is for new files only; put the change to "
                f"{rel.as_posix()} into {unit.name}/changes.patch instead."
            )
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(unit.files_dir / rel, dest)
        touched.append(rel.as_posix())
    if unit.patch.is_file() and unit.patch.stat().st_size:
        try:
            proc = run_git(
                tree, "apply", "--whitespace=nowarn", str(unit.patch.resolve())
            )
        except FileNotFoundError as err:
            raise VendorError(
                "`git` is needed to apply the patch units; install git"
            ) from err
        if proc.returncode != 0:
            raise VendorError(explain_apply_failure(unit, proc.stderr))
        touched.extend(h.file for h in parse_hunks(unit.patch.read_text()))
    return sorted(set(touched))


def apply_series(units: list[Unit], tree: Path) -> None:
    for unit in units:
        apply_unit(unit, tree)
