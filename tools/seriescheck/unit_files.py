"""Which files a unit touches, and which unit tests a tree of the series runs."""

from __future__ import annotations

from pathlib import Path

from vendorlib.pin import Unit


def is_test_file(rel: str) -> bool:
    """A pytest test module under `tests/` (pytest's default file patterns)."""
    path = Path(rel)
    return (
        path.parts[:1] == ("tests",)
        and path.suffix == ".py"
        and (path.name.startswith("test_") or path.stem.endswith("_test"))
    )


def own_test_files(unit: Unit) -> list[str]:
    """The unit's own tests: test files it adds under `tests/` or changes."""
    return sorted(
        f for f, kind in unit.files().items() if kind != "D" and is_test_file(f)
    )


def touched_files(unit: Unit) -> set[str]:
    """Every upstream path a unit adds, changes or deletes (both sides of a rename)."""
    return set(unit.files())


def source_files(unit: Unit) -> set[str]:
    """The upstream source files (``src/``) a unit adds or changes."""
    return {rel for rel in touched_files(unit) if rel.startswith("src/")}


def tree_test_dir_files(tree: Path) -> list[str]:
    """Every file under the tree's `tests/` (helpers and conftests included)."""
    top = tree / "tests"
    if not top.is_dir():
        return []
    return sorted(
        p.relative_to(tree).as_posix()
        for p in top.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )


def tree_test_files(tree: Path) -> list[str]:
    """The test files under the tree's `tests/`: those of every unit so far."""
    return [rel for rel in tree_test_dir_files(tree) if is_test_file(rel)]


def relevant_test_files(units: list[Unit], i: int, tree: Path) -> list[str]:
    """The test files tree ``i`` (pin + units[:i+1]) runs besides upstream's suite.

    The unit's own tests, and those of each earlier unit that changes a source
    file this unit changes too: where two units meet most often. It is a cheap
    guess, not a proof: a unit can break another's tests through a file only one
    of them changes. Every unit's tests run together on the last tree, the
    install (tests/tools/test_vendor_build.py), which catches such a break unless
    a later unit undoes it.
    """
    mine = source_files(units[i])
    wanted = set(own_test_files(units[i]))
    for earlier in units[:i]:
        if source_files(earlier) & mine:
            wanted |= set(own_test_files(earlier))
    return [rel for rel in tree_test_files(tree) if rel in wanted]
