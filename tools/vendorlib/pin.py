"""Read the pin (`UPSTREAM.toml`) and the ordered unit list (`series`)."""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .errors import VendorError

PATCHES_DIRNAME = "upstream_patches"


@dataclass(frozen=True)
class Pin:
    """The pinned upstream release and the Requires-Dist entries we drop."""

    name: str
    version: str
    sdist: str
    sha256: str
    drop_requires: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Unit:
    """One patch unit: a directory holding `PR.md`, `changes.patch` and `files/`."""

    name: str
    path: Path

    @property
    def patch(self) -> Path:
        return self.path / "changes.patch"

    @property
    def files_dir(self) -> Path:
        return self.path / "files"

    def new_files(self) -> list[Path]:
        """Paths (relative to `files/`) of the new files this unit adds, sorted."""
        if not self.files_dir.is_dir():
            return []
        return sorted(
            p.relative_to(self.files_dir)
            for p in self.files_dir.rglob("*")
            if p.is_file()
        )


def patches_dir(root: Path) -> Path:
    return root / PATCHES_DIRNAME


def load_pin(root: Path) -> Pin:
    """Parse `upstream_patches/UPSTREAM.toml` of the project at ``root``."""
    path = patches_dir(root) / "UPSTREAM.toml"
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError as err:
        raise VendorError(f"{path}: missing; it pins the upstream release") from err
    except tomllib.TOMLDecodeError as err:
        raise VendorError(f"{path}: not valid TOML: {err}") from err
    up = data.get("upstream", {})
    missing = [k for k in ("name", "version", "sdist", "sha256") if not up.get(k)]
    if missing:
        raise VendorError(f"{path}: [upstream] lacks {', '.join(missing)}")
    drop = tuple(data.get("dependencies", {}).get("drop", []))
    return Pin(up["name"], up["version"], up["sdist"], up["sha256"].lower(), drop)


def load_series(root: Path) -> list[Unit]:
    """The units named in `upstream_patches/series`, in order, each checked to exist."""
    pdir = patches_dir(root)
    series = pdir / "series"
    if not series.exists():
        return []
    units = []
    for lineno, raw in enumerate(series.read_text().splitlines(), start=1):
        name = raw.split("#", 1)[0].strip()
        if not name:
            continue
        unit_dir = pdir / name
        if not unit_dir.is_dir():
            raise VendorError(
                f"{series}:{lineno}: unit {name!r} has no directory {unit_dir}; "
                "fix the name or remove the line"
            )
        units.append(Unit(name, unit_dir))
    return units


def inputs_digest(root: Path) -> str:
    """A hash over the pin and every unit's files: a stale vendored tree differs."""
    pin = load_pin(root)
    h = hashlib.sha256()
    h.update(pin.sha256.encode())
    for unit in load_series(root):
        h.update(b"\0unit\0" + unit.name.encode())
        for p in sorted(unit.path.rglob("*")):
            if p.is_file():
                h.update(b"\0" + p.relative_to(unit.path).as_posix().encode() + b"\0")
                h.update(p.read_bytes())
    return h.hexdigest()
