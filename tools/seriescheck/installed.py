"""Where an interpreter imports `speculators` from, and whether that install holds
exactly a given tree (asked of a child interpreter: importing it here would be slow
and would pin this process to one tree)."""

from __future__ import annotations

import filecmp
from pathlib import Path

from vendorlib.errors import VendorError
from vendorlib.proc import captured

from .pytest_run import tree_env

# Where `import speculators` would load it from, without running it (torch is slow).
_WHERE = "import importlib.util as u; print(u.find_spec('speculators').origin)"


def imported_from(python: str, tree: Path, cwd: Path) -> str:
    """Where ``python`` imports `speculators` from with :func:`tree_env`; checked."""
    proc = captured([python, "-c", _WHERE], cwd=cwd, env=tree_env(tree / "src"))
    where = proc.stdout.strip()
    src = (tree / "src").resolve()
    if proc.returncode != 0 or not Path(where).resolve().is_relative_to(src):
        raise VendorError(
            f"{python} imports speculators from {where or '(nothing)'}, not from "
            f"{src}: {proc.stderr.strip()[-500:]}"
        )
    return where


def installed_package(python: str, cwd: Path) -> Path | None:
    """The `speculators` package folder ``python`` imports without PYTHONPATH."""
    proc = captured([python, "-c", _WHERE], cwd=cwd, env=tree_env(None))
    where = proc.stdout.strip()
    return Path(where).parent if proc.returncode == 0 and where else None


def same_package(installed: Path, tree: Path) -> bool:
    """Whether the installed package holds exactly the tree's `src/speculators`."""

    def files(top: Path) -> dict[str, Path]:
        return {
            p.relative_to(top).as_posix(): p
            for p in top.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        }

    want, have = files(tree / "src" / "speculators"), files(installed)
    return want.keys() == have.keys() and all(
        filecmp.cmp(want[k], have[k], shallow=False) for k in want
    )
