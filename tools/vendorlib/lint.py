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
from dataclasses import dataclass
from pathlib import Path

from .pin import Unit
from .proc import captured
from .sdist import cache_dir

PASS, FAIL, MISSING, SKIPPED = "pass", "FAIL", "missing", "skipped"


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


def _run(
    cmd: list[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return captured(cmd, cwd=cwd, env={**os.environ, **env} if env else None)


def _ruff_findings(ruff: list[str], tree: Path, files: list[str]) -> list[dict]:
    if not files:
        return []
    proc = _run(
        [
            *ruff,
            "check",
            "--no-cache",
            "--config",
            str(tree / "pyproject.toml"),
            "--output-format",
            "json",
            *files,
        ],
        tree,
    )
    try:
        found = json.loads(proc.stdout or "[]")
    except ValueError:
        return [{"error": proc.stdout + proc.stderr}]
    # The sdist ships no tests/ package, so whether a test module sits in a
    # namespace package cannot be judged from it: INP001 there is left out.
    for f in found:
        f["rel"] = Path(f["filename"]).resolve().relative_to(tree.resolve()).as_posix()
        f["text"] = _line(tree, f["rel"], f["location"]["row"])
    return [
        f
        for f in found
        if not (f["code"] == "INP001" and f["rel"].startswith("tests/"))
    ]


def ruff_check(tree: Path, files: list[str], base: Path | None) -> LintResult:
    ruff = find_tool("ruff")
    if ruff is None:
        return LintResult("ruff check", MISSING, "ruff is not installed; skipped")
    found = _ruff_findings(ruff, tree, files)
    if found and "error" in found[0]:
        return LintResult("ruff check", FAIL, found[0]["error"])
    old: Counter[tuple[str, str, str]] = Counter()
    if base is not None:
        present = [f for f in files if (base / f).is_file()]
        old.update(
            (f["rel"], f["code"], f["text"])
            for f in _ruff_findings(ruff, base, present)
        )
    new, ignored = [], 0
    for f in found:
        key = (f["rel"], f["code"], f["text"])
        if old[key] > 0:
            old[key] -= 1
            ignored += 1
            continue
        loc = f["location"]
        new.append(
            f"{f['rel']}:{loc['row']}:{loc['column']}: {f['code']} {f['message']}"
        )
    return LintResult("ruff check", FAIL if new else PASS, "\n".join(new), ignored)


def ruff_format(tree: Path, files: list[str], base: Path | None) -> LintResult:
    ruff = find_tool("ruff")
    if ruff is None:
        return LintResult(
            "ruff format --check", MISSING, "ruff is not installed; skipped"
        )

    def unformatted(where: Path, paths: list[str]) -> set[str]:
        if not paths:
            return set()
        proc = _run(
            [
                *ruff,
                "format",
                "--check",
                "--no-cache",
                "--config",
                str(where / "pyproject.toml"),
                *paths,
            ],
            where,
            # The tree's own package (src/) and tests, not an installed copy.
            env={"MYPYPATH": str(where / "src")},
        )
        return set(re.findall(r"^Would reformat: (.+)$", proc.stdout, re.M))

    bad = unformatted(tree, files)
    old = unformatted(base, [f for f in bad if (base / f).is_file()]) if base else set()
    new = sorted(bad - old)
    out = "\n".join(f"would reformat: {f}" for f in new)
    return LintResult("ruff format --check", FAIL if new else PASS, out, len(bad & old))


_MYPY = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+): error: (?P<msg>.*)$", re.M)


def mypy_check(tree: Path, files: list[str], base: Path | None) -> LintResult:
    mypy = find_tool("mypy")
    tool = "mypy --check-untyped-defs"
    if mypy is None:
        return LintResult(tool, MISSING, "mypy is not installed; skipped")
    cache = cache_dir().parent / "mypy"

    def errors(where: Path, paths: list[str]) -> list[tuple[str, int, str]]:
        if not paths:
            return []
        proc = _run(
            [
                *mypy,
                "--check-untyped-defs",
                # Test modules live in plain directories (no __init__.py, as in
                # upstream's tests/): name modules by their path from the root.
                "--explicit-package-bases",
                "--config-file",
                str(where / "pyproject.toml"),
                "--cache-dir",
                str(cache),
                *paths,
            ],
            where,
            # The tree's own package (src/) and tests, not an installed copy.
            env={"MYPYPATH": str(where / "src")},
        )
        if proc.returncode not in (0, 1):
            return [("", 0, proc.stdout + proc.stderr)]
        return [
            (m["file"], int(m["line"]), m["msg"]) for m in _MYPY.finditer(proc.stdout)
        ]

    found = errors(tree, files)
    if found and found[0][0] == "" and found[0][1] == 0:
        return LintResult(tool, FAIL, found[0][2])
    old: Counter[tuple[str, str, str]] = Counter()
    if base is not None:
        present = [f for f in files if (base / f).is_file()]
        old.update((f, m, _line(base, f, n)) for f, n, m in errors(base, present))
    new, ignored = [], 0
    for f, n, m in found:
        key = (f, m, _line(tree, f, n))
        if old[key] > 0:
            old[key] -= 1
            ignored += 1
            continue
        new.append(f"{f}:{n}: error: {m}")
    return LintResult(tool, FAIL if new else PASS, "\n".join(new), ignored)


def lint(
    tree: Path, files: list[str], base: Path | None, mypy: bool = False
) -> list[LintResult]:
    """ruff check + ruff format --check (+ mypy) of ``files`` in ``tree``."""
    files = [f for f in files if (tree / f).is_file()]
    results = [ruff_check(tree, files, base), ruff_format(tree, files, base)]
    if mypy:
        results.append(mypy_check(tree, files, base))
    return results
