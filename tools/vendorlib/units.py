"""Apply a patch unit to an upstream tree with `git apply`; explain a failure."""

from __future__ import annotations

import re
from pathlib import Path

from .errors import VendorError
from .git import git
from .pin import Unit

_FAILED = re.compile(r"patch failed: (?P<file>.+?):(?P<line>\d+)")


def explain_apply_failure(unit: Unit, stderr: str) -> str:
    """Turn `git apply` stderr into: unit, file, hunk (header and position)."""
    lines = [f"unit {unit.name}: {unit.path} does not apply to this upstream tree"]
    hunks = unit.hunks()
    for m in _FAILED.finditer(stderr):
        file, old = m["file"], int(m["line"])
        h = next((h for h in hunks if h.file == file and h.old_start == old), None)
        if h is not None:
            lines.append(
                f"  file {file}, hunk {h.index} of {h.count} "
                f"(upstream line {old}): {h.header}"
            )
        else:
            lines.append(f"  file {file}, at upstream line {old}")
    for f in re.findall(r"error: (\S+): already exists in working directory", stderr):
        lines.append(
            f"  file {f}: the unit adds it, but the upstream tree has it already"
        )
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


def apply_unit(unit: Unit, tree: Path, check: bool = False) -> list[str]:
    """Apply one unit to ``tree`` (``check``: only test that it would apply);
    return the upstream-relative paths it touches."""
    args = ["apply", "--whitespace=nowarn", *(["--check"] if check else [])]
    proc = git(tree, *args, str(unit.path.resolve()), check=False)
    if proc.returncode != 0:
        raise VendorError(explain_apply_failure(unit, proc.stderr))
    return sorted(unit.files())
