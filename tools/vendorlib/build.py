"""Materialize the patched upstream tree and describe it to the build (`setup.py`).

The tree (`.vendored/`) is the build's own output directory: it is ignored by git,
packed into our sdist, and checked on every build against `SHA256SUMS` (written with
it), so a wheel built from the sdist needs neither the network nor git.
"""

from __future__ import annotations

import configparser
import email.parser
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .errors import VendorError
from .gitwork import materialize_git
from .pin import Pin, inputs_digest, load_pin, load_series, pinned_tree
from .sdist import sha256_of

VENDORED_DIRNAME = ".vendored"
STAMP = ".speculators-kimi-stamp"
SUMS = "SHA256SUMS"
_EXTRA = re.compile(
    r"""^(?P<req>.+?)\s*;\s*extra\s*==\s*["'](?P<extra>[^"']+)["']\s*$"""
)
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _log(msg: str) -> None:
    print(f"[speculators-kimi] {msg}", file=sys.stderr)


def materialize(
    root: Path, dest: Path, sdist: Path | None = None, quiet: bool = False
) -> Path:
    """Write upstream + every unit of the series to ``dest`` (replaced atomically):
    `git am` in a throwaway history, whose `.git` is then dropped."""
    pin = load_pin(root)
    units = load_series(root)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".materialize-") as tmp:
        tree = pinned_tree(root, Path(tmp) / "tree", sdist)
        materialize_git(
            root,
            tree,
            units,
            None if quiet else lambda u, t: _log(f"applied {u.name} ({len(t)} files)"),
        )
        shutil.rmtree(tree / ".git")
        _park_upstream_metadata(tree)
        write_notice(tree, pin, [u.name for u in units])
        _write_sums(tree)
        (tree / STAMP).write_text(_stamp(root, tree))
        if dest.exists():
            shutil.rmtree(dest)
        tree.rename(dest)
    return dest


UPSTREAM_METADATA = "upstream-metadata"


def _park_upstream_metadata(tree: Path) -> None:
    """Move the sdist's `src/*.egg-info` out of the import path.

    Left in `src/`, it would make upstream's own `speculators` distribution appear
    installed wherever the tree is importable (the upstream-conflict check, and
    `importlib.metadata` answering for a distribution that is not there).
    """
    for info in tree.glob("src/*.egg-info"):
        dest = tree / UPSTREAM_METADATA / info.name
        dest.parent.mkdir(exist_ok=True)
        info.rename(dest)


def vendored_dir(root: Path) -> Path:
    return root / VENDORED_DIRNAME


def ensure_vendored(root: Path) -> Path:
    """The project's `.vendored` tree, rebuilt when the pin or a unit changed.

    A tree whose stamp matches the pin and the units is used as it is (our sdist
    ships it: no download, no git), once every file matches `SHA256SUMS`.
    """
    dest = vendored_dir(root)
    stamp = dest / STAMP
    if stamp.is_file() and stamp.read_text() == _stamp(root, dest):
        check_sums(dest)
        return dest
    return materialize(root, dest)


def _stamp(root: Path, tree: Path) -> str:
    """What the tree was made from (pin and units) and its `SHA256SUMS`."""
    sums = tree / SUMS
    digest = sha256_of(sums) if sums.is_file() else ""
    return f"{inputs_digest(root)}\nsums {digest}\n"


def _tree_files(tree: Path) -> list[Path]:
    return sorted(
        p
        for p in tree.rglob("*")
        if p.is_file()
        and p.name not in (STAMP, SUMS)
        and "__pycache__" not in p.relative_to(tree).parts
    )


def _write_sums(tree: Path) -> None:
    lines = [
        f"{sha256_of(p)}  {p.relative_to(tree).as_posix()}" for p in _tree_files(tree)
    ]
    (tree / SUMS).write_text("\n".join(lines) + "\n")


def check_sums(tree: Path) -> None:
    """Raise unless every file of ``tree`` is the one materialized (`SHA256SUMS`)."""
    fix = f"delete {tree} and build again to materialize it anew"
    sums = tree / SUMS
    expected = {
        name: digest
        for digest, name in (
            line.split("  ", 1) for line in sums.read_text().splitlines()
        )
    }
    found = {p.relative_to(tree).as_posix(): p for p in _tree_files(tree)}
    for name in sorted(expected.keys() | found.keys()):
        if name not in found:
            raise VendorError(f"{tree / name}: missing from the vendored tree; {fix}")
        if name not in expected:
            raise VendorError(f"{tree / name}: not part of the vendored tree; {fix}")
        if sha256_of(found[name]) != expected[name]:
            raise VendorError(
                f"{tree / name}: changed since it was materialized (sha256 differs "
                f"from {sums}); {fix}"
            )


@dataclass(frozen=True)
class Requirements:
    """Runtime requirements of the upstream release, as its metadata declares them."""

    base: list[str]
    extras: dict[str, list[str]]


def _requires_dist(tree: Path) -> list[str]:
    pkg_info = tree / "PKG-INFO"
    if not pkg_info.is_file():
        raise VendorError(f"{pkg_info}: missing; the sdist has no metadata to read")
    meta = email.parser.Parser().parsestr(pkg_info.read_text())
    return meta.get_all("Requires-Dist") or []


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-")


def _requirement_name(req: str) -> str | None:
    """The distribution a requirement names, canonical (``Foo_Bar`` -> ``foo-bar``)."""
    m = _NAME.match(req)
    return _canonical(m.group(1)) if m else None


def upstream_requirements(tree: Path, pin: Pin) -> Requirements:
    """Requires-Dist of the sdist's PKG-INFO, minus the pin's `drop` list and `dev`."""
    dropped = {_canonical(d) for d in pin.drop_requires}
    base: list[str] = []
    extras: dict[str, list[str]] = {}
    for req in _requires_dist(tree):
        if _requirement_name(req) in dropped:
            continue
        if m := _EXTRA.match(req):
            if m["extra"] != "dev":
                extras.setdefault(m["extra"], []).append(m["req"])
        else:
            base.append(req)
    return Requirements(base, extras)


def upstream_dev_requirement(tree: Path, name: str) -> str:
    """Upstream's `dev` pin of ``name`` (e.g. ``ruff~=0.15.20``): its linters run at
    these versions, in its pre-commit and CI, so the units are linted with them."""
    for req in _requires_dist(tree):
        m = _EXTRA.match(req)
        if m and m["extra"] == "dev" and _requirement_name(m["req"]) == name:
            return m["req"]
    raise VendorError(f"{tree / 'PKG-INFO'}: the dev extra does not name {name}")


def upstream_console_scripts(tree: Path) -> list[str]:
    """Upstream's console scripts (``name = module:attr``) from its egg-info."""
    found = list(tree.glob(f"{UPSTREAM_METADATA}/*.egg-info/entry_points.txt"))
    if not found:
        return []
    parser = configparser.ConfigParser()
    parser.read(found[0])
    if not parser.has_section("console_scripts"):
        return []
    return [f"{k} = {v}" for k, v in parser.items("console_scripts")]


def build_info_text(pin: Pin, units: list[str]) -> str:
    """`speculators_kimi/_build_info.py` as the wheel carries it: what it vendors."""
    return (
        '"""Written by the build (tools/vendorlib/build.py); do not edit."""\n\n'
        f"UPSTREAM_NAME = {pin.name!r}\n"
        f"UPSTREAM_VERSION = {pin.version!r}\n"
        f"UPSTREAM_SHA256 = {pin.sha256!r}\n"
        f"PATCHES: tuple[str, ...] = {tuple(units)!r}\n"
    )


def write_notice(tree: Path, pin: Pin, units: list[str]) -> Path:
    """The Apache-2.0 NOTICE for the modified files: release and applied units."""
    lines = [
        "speculators-kimi",
        "",
        f"This distribution contains a modified copy of {pin.name} {pin.version}",
        "(Apache License 2.0; its license text is UPSTREAM-LICENSE).",
        f"Unmodified release: sdist {pin.sdist}, sha256 {pin.sha256}.",
        "",
        "The copy was modified by applying these patch units, in order",
        "(each unit's files are listed in upstream_patches/<unit>/):",
        *(f"  - {u}" for u in units),
        "",
    ]
    path = tree / "NOTICE"
    path.write_text("\n".join(lines))
    lic = tree / "LICENSE"
    if lic.is_file():
        shutil.copyfile(lic, tree / "UPSTREAM-LICENSE")
    return path
