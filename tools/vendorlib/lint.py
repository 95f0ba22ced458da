"""Upstream's linters (its pyproject.toml settings) on the files the units touch.

Findings that the pristine release already has on the same line text are not the
units' doing and are left out (counted); a missing tool is reported, not fatal.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .build import upstream_dev_requirement
from .errors import VendorError
from .pin import Unit
from .proc import captured
from .sdist import cache_dir

PASS, FAIL, MISSING, SKIPPED = "pass", "FAIL", "missing", "skipped"

#: A finding: (file, code or message, the line's text) to match the base's, and
#: the line shown.
Finding = tuple[tuple[str, str, str], str]


@dataclass
class LintResult:
    tool: str
    status: str
    output: str
    ignored: int = 0  # findings the pristine release has as well

    def render(self) -> str:
        head = f"== {self.tool}: {self.status}"
        if self.ignored:
            head += f" ({self.ignored} pre-existing upstream findings left out)"
        return head + "\n" + (self.output.rstrip() + "\n" if self.output else "")


class _ToolFailed(Exception):
    """The linter itself failed; its output is the message."""


def find_tool(name: str) -> list[str] | None:
    """The command for ``name``: the one beside this Python first, then PATH."""
    local = Path(sys.executable).parent / name
    if local.is_file() and os.access(local, os.X_OK):
        return [str(local)]
    if path := shutil.which(name):
        return [path]
    if importlib.util.find_spec(name) is not None:
        return [sys.executable, "-m", name]
    return None


def unit_py_files(units: list[Unit]) -> list[str]:
    """Upstream-relative .py paths that the units change or add, sorted."""
    files = {f for u in units for f, kind in u.files().items() if kind != "D"}
    return sorted(f for f in files if f.endswith(".py"))


def _line(tree: Path, rel: str, row: int) -> str:
    try:
        return (tree / rel).read_text(errors="replace").splitlines()[row - 1].strip()
    except (OSError, IndexError):
        return ""


def _run(cmd: list[str], where: Path) -> subprocess.CompletedProcess[str]:
    """``cmd`` in ``where``, importing the tree's own `src/` (not an installed copy)."""
    return captured(cmd, cwd=where, env={**os.environ, "MYPYPATH": str(where / "src")})


def _ruff_check(ruff: list[str], where: Path, files: list[str]) -> list[Finding]:
    config = ["--config", str(where / "pyproject.toml")]
    cmd = [*ruff, "check", "--no-cache", *config, "--output-format", "json", *files]
    proc = _run(cmd, where)
    try:
        found = json.loads(proc.stdout or "[]")
    except ValueError as err:
        raise _ToolFailed(proc.stdout + proc.stderr) from err
    out = []
    for f in found:
        rel = Path(f["filename"]).resolve().relative_to(where.resolve()).as_posix()
        # The sdist ships no tests/ package, so whether a test module sits in a
        # namespace package cannot be judged from it: INP001 there is left out.
        if f["code"] == "INP001" and rel.startswith("tests/"):
            continue
        row, col = f["location"]["row"], f["location"]["column"]
        shown = f"{rel}:{row}:{col}: {f['code']} {f['message']}"
        out.append(((rel, f["code"], _line(where, rel, row)), shown))
    return out


def _ruff_format(ruff: list[str], where: Path, files: list[str]) -> list[Finding]:
    config = ["--config", str(where / "pyproject.toml")]
    proc = _run([*ruff, "format", "--check", "--no-cache", *config, *files], where)
    bad = sorted(re.findall(r"^Would reformat: (.+)$", proc.stdout, re.M))
    return [((f, "", ""), f"would reformat: {f}") for f in bad]


_MYPY = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+): error: (?P<msg>.*)$", re.M)


def _mypy(mypy: list[str], where: Path, files: list[str]) -> list[Finding]:
    config = ["--config-file", str(where / "pyproject.toml")]
    cache = ["--cache-dir", str(cache_dir().parent / "mypy")]
    # Test modules live in plain directories (no __init__.py, as in upstream's
    # tests/): name modules by their path from the root.
    flags = ["--check-untyped-defs", "--explicit-package-bases"]
    proc = _run([*mypy, *flags, *config, *cache, *files], where)
    if proc.returncode not in (0, 1):
        raise _ToolFailed(proc.stdout + proc.stderr)
    return [
        ((m["file"], m["msg"], _line(where, m["file"], int(m["line"]))), m[0])
        for m in _MYPY.finditer(proc.stdout)
    ]


def not_upstreams_version(cmd: list[str], tool: str, tree: Path) -> str | None:
    """Why ``cmd`` is not the version upstream lints with, or None if it is: another
    ruff formats and flags differently (0.17 wants lines that 0.15 joins)."""
    try:
        pinned = upstream_dev_requirement(tree, tool)
    except VendorError:
        return None  # a release whose dev extra does not pin it
    from packaging.requirements import Requirement

    proc = captured([*cmd, "--version"])
    found = re.search(r"\b\d+(\.\d+)+\b", proc.stdout)
    version = found.group(0) if found else "?"
    if found and Requirement(pinned).specifier.contains(version):
        return None
    return (
        f"{tool} {version} is not the version upstream lints with ({pinned}, from "
        f"its dev extra): pip install '{pinned}' (our test extra pins it)"
    )


_TOOLS: list[tuple[str, str, Callable[[list[str], Path, list[str]], list[Finding]]]]
_TOOLS = [
    ("ruff check", "ruff", _ruff_check),
    ("ruff format --check", "ruff", _ruff_format),
    ("mypy --check-untyped-defs", "mypy", _mypy),
]


def _compare(
    name: str,
    cmd: list[str],
    finder: Callable[[list[str], Path, list[str]], list[Finding]],
    tree: Path,
    files: list[str],
    base: Path | None,
) -> LintResult:
    """``cmd``'s findings in ``tree`` less those ``base`` has on the same line."""
    present = [f for f in files if base is not None and (base / f).is_file()]
    try:
        found = finder(cmd, tree, files) if files else []
        old = finder(cmd, base, present) if base is not None and present else []
    except _ToolFailed as err:
        return LintResult(name, FAIL, str(err))
    counts = Counter(key for key, _ in old)
    new = []
    for key, shown in found:
        if counts[key] > 0:
            counts[key] -= 1
        else:
            new.append(shown)
    status = FAIL if new else PASS
    return LintResult(name, status, "\n".join(new), len(found) - len(new))


def lint(
    tree: Path, files: list[str], base: Path | None, mypy: bool = False
) -> list[LintResult]:
    """ruff check + ruff format --check (+ mypy) of ``files`` in ``tree``."""
    files = [f for f in files if (tree / f).is_file()]
    tools = _TOOLS[: 3 if mypy else 2]
    # Each tool found and its version checked once (ruff serves two checks).
    commands = {tool: find_tool(tool) for _, tool, _ in tools}
    wrong = {
        tool: not_upstreams_version(cmd, tool, tree)
        for tool, cmd in commands.items()
        if cmd is not None
    }
    results = []
    for name, tool, finder in tools:
        cmd = commands[tool]
        if cmd is None:
            missing = f"{tool} is not installed; skipped"
            results.append(LintResult(name, MISSING, missing))
        elif problem := wrong[tool]:
            results.append(LintResult(name, FAIL, problem))
        else:
            results.append(_compare(name, cmd, finder, tree, files, base))
    return results
