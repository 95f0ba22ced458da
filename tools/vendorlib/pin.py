"""The pin (`UPSTREAM.toml`), the series of units (`series`) and what a unit touches.

A unit is one `git format-patch` file, `upstream_patches/<name>.patch`: its commit
message is the unit's PR text, its diff adds new files and changes upstream ones.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .errors import VendorError
from .sdist import extract, obtain

PATCHES_DIRNAME = "upstream_patches"
_DIFF = re.compile(r"^diff --git a/(?P<a>\S+) b/(?P<b>\S+)$")
_HUNK = re.compile(r"^@@ -(?P<old>\d+)(?:,\d+)? \+\d+(?:,\d+)? @@.*$")


@dataclass(frozen=True)
class Pin:
    """The pinned upstream release and the Requires-Dist entries we drop."""

    name: str
    version: str
    sdist: str
    sha256: str
    drop_requires: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Hunk:
    """One hunk of a unit's diff: file, 1-based index in that file, header."""

    file: str
    index: int
    count: int
    old_start: int
    header: str


#: The sections of a unit's PR text, in order, each under a `## ` heading.
PR_SECTIONS = ("Problem", "Change", "Tests", "Risk")


def pr_sections(text: str) -> tuple[str, dict[str, str]]:
    """Title and ``## Section`` bodies of a unit's PR text."""
    title, sections, current = "", {}, ""
    for line in text.splitlines():
        if line.startswith("# ") and not title:
            title = line[2:].strip()
        elif line.startswith("## "):
            current = line[3:].strip()
            sections[current] = ""
        elif current:
            sections[current] += line + "\n"
    return title, {k: v.strip() for k, v in sections.items()}


@dataclass(frozen=True)
class Unit:
    """One patch unit: `upstream_patches/<name>.patch`."""

    name: str
    path: Path

    def text(self) -> str:
        return self.path.read_text()

    def message(self) -> str:
        """The commit message's body: the unit's PR text (`# title`, `## ...`)."""
        head, _, rest = self.text().partition("\n\n")
        if not head.startswith("From "):
            return ""  # a bare diff: no message
        return rest.split("\ndiff --git ", 1)[0]

    def pr_text_problems(self) -> list[str]:
        """What its PR text lacks: the `# title`, or a section of
        :data:`PR_SECTIONS` (missing, or empty as the template leaves it)."""
        message = self.message()
        if not message.startswith("# "):
            return ["no PR text (`# title`) in its message"]
        _, sections = pr_sections(message)
        return [
            f"its PR text has no `## {name}`"
            if name not in sections
            else f"its PR text's `## {name}` is empty"
            for name in PR_SECTIONS
            if not sections.get(name)
        ]

    def files(self) -> dict[str, str]:
        """Each path the diff names -> ``A`` (it adds the file), ``D`` (deletes) or
        ``M``; a rename is its old path deleted and its new one added."""
        out: dict[str, str] = {}
        current = ""
        for line in self.text().splitlines():
            if m := _DIFF.match(line):
                current = m["b"]
                out[current] = "M"
                if m["a"] != m["b"]:
                    out[m["a"]], out[current] = "D", "A"
            elif current and line.startswith("new file mode"):
                out[current] = "A"
            elif current and line.startswith("deleted file mode"):
                out[current] = "D"
        return out

    def new_files(self) -> list[str]:
        return sorted(f for f, kind in self.files().items() if kind == "A")

    def hunks(self) -> list[Hunk]:
        """Every hunk of the diff, with its position among its file's hunks."""
        per_file: dict[str, list[tuple[int, str]]] = {}
        current = ""
        for line in self.text().splitlines():
            if m := _DIFF.match(line):
                current = m["b"]
                per_file.setdefault(current, [])
            elif current and (m := _HUNK.match(line)):
                per_file[current].append((int(m["old"]), line))
        return [
            Hunk(file, i, len(items), old, header)
            for file, items in per_file.items()
            for i, (old, header) in enumerate(items, start=1)
        ]


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


def pinned_tree(root: Path, dest: Path, sdist: Path | None = None) -> Path:
    """The pinned release (its hash checked), extracted to ``dest``."""
    pin = load_pin(root)
    return extract(obtain(pin.name, pin.version, pin.sdist, pin.sha256, sdist), dest)


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
        path = pdir / f"{name}.patch"
        if not path.is_file():
            raise VendorError(
                f"{series}:{lineno}: unit {name!r} has no file {path}; "
                "fix the name or remove the line"
            )
        units.append(Unit(name, path))
    return units


def inputs_digest(root: Path) -> str:
    """A hash over the pin and every unit: a stale vendored tree differs."""
    h = hashlib.sha256(load_pin(root).sha256.encode())
    for unit in load_series(root):
        h.update(b"\0unit\0" + unit.name.encode() + b"\0" + unit.path.read_bytes())
    return h.hexdigest()
