"""`tools/vendor status`: per unit, its size and whether it applies (pin, tip)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from .errors import VendorError
from .git import git
from .gitwork import am, materialize_git
from .pin import Unit, load_pin, load_series, pinned_tree


@dataclass
class UnitStats:
    added: int  # + lines in upstream files
    removed: int  # - lines in upstream files
    new_files: int
    new_lines: int


def unit_stats(unit: Unit) -> UnitStats:
    """The unit's size, from `git apply --numstat` (binary files count no lines)."""
    new = set(unit.new_files())
    added = removed = new_lines = 0
    numstat = git(unit.path.parent, "apply", "--numstat", str(unit.path.resolve()))
    for row in numstat.stdout.splitlines():
        plus, minus, path = row.split("\t", 2)
        if path in new:
            new_lines += int(plus) if plus != "-" else 0
        elif plus != "-":
            added, removed = added + int(plus), removed + int(minus)
    return UnitStats(added, removed, len(new), new_lines)


def check_unit(unit: Unit, tree: Path) -> str | None:
    """Why ``unit`` does not apply to ``tree`` (None: it does); ``tree`` unchanged."""
    proc = git(tree, "apply", "--check", str(unit.path.resolve()), check=False)
    if proc.returncode == 0:
        return None
    first = (proc.stderr.strip().splitlines() or ["git apply failed"])[0]
    return first.removeprefix("error: ")


def applies(units: list[Unit], repo: Path) -> dict[str, tuple[bool, bool, str]]:
    """Per unit: (applies alone to ``repo``'s HEAD, `git am`s after the earlier
    units that did, reason if not)."""
    out: dict[str, tuple[bool, bool, str]] = {}
    seq = repo.parent / f"{repo.name}-series"
    git(repo.parent, "clone", "-q", str(repo.resolve()), str(seq))
    for unit in units:
        alone = check_unit(unit, repo)
        in_order = check_unit(unit, seq)
        if in_order is None:
            am(seq, unit)
        out[unit.name] = (alone is None, in_order is None, in_order or alone or "")
    return out


def upstream_tip(repo: Path, dest: Path) -> str:
    """Clone the git repository ``repo`` to ``dest``; return the sha of its HEAD."""
    if not (repo / ".git").exists() and not (repo / "HEAD").is_file():
        raise VendorError(f"--upstream-git {repo}: not a git repository")
    git(dest.parent, "clone", "-q", str(repo.resolve()), str(dest))
    return git(dest, "rev-parse", "HEAD").stdout.strip()


def _yes(alone: bool, in_order: bool) -> str:
    if in_order and alone:
        return "yes"
    if in_order:
        return "yes (needs earlier units)"
    return "NO"


def status(root: Path, upstream_git: Path | None, sdist: Path | None) -> int:
    pin = load_pin(root)
    units = load_series(root)
    with tempfile.TemporaryDirectory() as tmp:
        tree = pinned_tree(root, Path(tmp) / "pin", sdist)
        materialize_git(root, tree, [])
        at_pin = applies(units, tree)
        at_tip: dict[str, tuple[bool, bool, str]] = {}
        tip = ""
        if upstream_git is not None:
            tip = upstream_tip(upstream_git, Path(tmp) / "tip")
            at_tip = applies(units, Path(tmp) / "tip")
    print(
        f"pin: {pin.name} {pin.version}" + (f"; upstream tip {tip[:12]}" if tip else "")
    )
    header = f"{'unit':40} {'upstream +/-':>13} {'new files':>9} {'lines':>6}  pin"
    print(header + ("  tip" if tip else ""))
    bad = False
    for unit in units:
        s = unit_stats(unit)
        alone, in_order, why = at_pin[unit.name]
        row = (
            f"{unit.name:40} {f'+{s.added}/-{s.removed}':>13} {s.new_files:>9} "
            f"{s.new_lines:>6}  {_yes(alone, in_order)}"
        )
        bad |= not in_order
        if tip:
            t_alone, t_in_order, t_why = at_tip[unit.name]
            row += f"  {_yes(t_alone, t_in_order)}"
            why = why or t_why
        print(row)
        if why and not (in_order and (not tip or at_tip[unit.name][1])):
            print(f"    {why}")
    return 1 if bad else 0
