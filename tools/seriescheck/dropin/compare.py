"""Pristine against ours, key by key, less the differences units state.

A value is compared as words (strings as they are, anything else as indented
JSON), so a help text rewrapped around one new option differs by that option's
words only. Each difference is a list of changes: ``-words`` that pristine has
and ours lacks, ``+words`` that ours adds. An intended difference
(`upstream_patches/INTENDED_DIFFERENCES.toml`) names its unit, the cases and keys
it applies to (globs) and a regular expression for each change it allows; a
change no entry of an applied unit allows is a difference the check reports. An
entry that applies to a compared value but allows nothing observed is stale and
reported too.
"""

from __future__ import annotations

import difflib
import fnmatch
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

INTENDED_FILE = "INTENDED_DIFFERENCES.toml"
_BOX = re.compile(r"^[│╭╮╰╯─┃━┏┓┗┛]+$")


@dataclass
class Intended:
    """One stated difference: which unit, where, which changes, why."""

    unit: str
    cases: list[str]
    keys: list[str]
    changes: list[str]
    why: str

    def applies(self, case: str, key: str) -> bool:
        return any(fnmatch.fnmatchcase(case, c) for c in self.cases) and any(
            fnmatch.fnmatchcase(key, k) for k in self.keys
        )

    def allows(self, change: str) -> bool:
        return any(re.fullmatch(p, change, re.DOTALL) for p in self.changes)


@dataclass
class Finding:
    """A change no applied unit states, at one case and key."""

    case: str
    key: str
    change: str


@dataclass
class Comparison:
    findings: list[Finding] = field(default_factory=list)
    stale: list[Intended] = field(default_factory=list)
    allowed: int = 0
    compared: int = 0

    @property
    def ok(self) -> bool:
        return not self.findings and not self.stale


def load_intended(patches: Path, units: list[str]) -> list[Intended]:
    """The stated differences of ``units`` (the ones applied to the tree)."""
    data = tomllib.loads((patches / INTENDED_FILE).read_text(encoding="utf-8"))
    out = []
    for i, raw in enumerate(data.get("difference", [])):
        missing = {"unit", "cases", "keys", "changes", "why"} - set(raw)
        if missing:
            raise ValueError(
                f"{patches / INTENDED_FILE}: difference {i + 1} lacks {sorted(missing)}"
            )
        entry = Intended(**raw)
        if entry.unit not in units and not (patches / f"{entry.unit}.patch").is_file():
            raise ValueError(
                f"{patches / INTENDED_FILE}: difference {i + 1} names {entry.unit!r}, "
                "no unit of the series"
            )
        if entry.unit in units:
            out.append(entry)
    return out


def _words(value: Any) -> list[str]:
    text = (
        value if isinstance(value, str) else json.dumps(value, indent=1, sort_keys=True)
    )
    return [w for w in text.split() if not _BOX.match(w)]


def changes(pristine: Any, ours: Any) -> list[str]:
    """The word runs that differ: ``-removed words`` and ``+added words``."""
    a, b = _words(pristine), _words(ours)
    out = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        if i2 > i1:
            out.append("-" + " ".join(a[i1:i2]))
        if j2 > j1:
            out.append("+" + " ".join(b[j1:j2]))
    return out


def allowed_by(change: str, entries: list[Intended]) -> list[Intended] | None:
    """The entries that together allow ``change``, or None.

    One entry may allow the whole change; else the change is split where an
    option starts (two units' new options side by side make one run of words)
    and each piece must be allowed by an entry.
    """
    whole = [e for e in entries if e.allows(change)]
    if whole or not entries:
        return whole or None
    sign, words = change[:1], change[1:].split(" ")
    cuts = [i for i, w in enumerate(words) if i and w.lstrip("[").startswith("-")]
    cuts.append(len(words))
    # reach[i]: the entries that allow words[:i] piece by piece (0 is the start).
    reach: dict[int, list[Intended]] = {0: []}
    for end in cuts:
        for start in sorted(reach):
            if start >= end or end in reach:
                continue
            piece = sign + " ".join(words[start:end])
            by = [e for e in entries if e.allows(piece)]
            if by:
                reach[end] = reach[start] + by[:1]
    return reach.get(len(words))


def _values(pristine: dict[str, Any], ours: dict[str, Any]) -> tuple[dict, dict]:
    """Both results of a case as key -> value.

    A case that failed as a whole on either tree (its child raised, or never ran)
    is one value, ``(case)``: "ok" or the error.
    """
    if "ok" in pristine and "ok" in ours:
        return pristine["ok"], ours["ok"]

    def whole(r: dict[str, Any]) -> dict[str, Any]:
        return {"(case)": "ok" if "ok" in r else f"error: {r.get('error')}"}

    return whole(pristine), whole(ours)


def compare(
    pristine: dict[str, Any],
    ours: dict[str, Any],
    intended: list[Intended],
) -> Comparison:
    """Every case and key of either tree, and the entries that allowed nothing.

    An entry is stale when a case and key it applies to were compared and none
    of its changes was observed.
    """
    result = Comparison()
    seen: set[int] = set()  # entries that apply to a compared value
    used: set[int] = set()  # entries that allowed a change
    for case in sorted(set(pristine) | set(ours)):
        a, b = _values(
            pristine.get(case, {"error": "not run"}),
            ours.get(case, {"error": "not run"}),
        )
        for key in sorted(set(a) | set(b)):
            result.compared += 1
            entries = [e for e in intended if e.applies(case, key)]
            seen.update(id(e) for e in entries)
            if a.get(key) == b.get(key):
                continue
            for change in changes(a.get(key), b.get(key)) or ["(same words)"]:
                allowing = allowed_by(change, entries)
                used.update(id(e) for e in allowing or [])
                if allowing:
                    result.allowed += 1
                else:
                    result.findings.append(Finding(case, key, change))
    result.stale = [e for e in intended if id(e) in seen and id(e) not in used]
    return result


def report(result: Comparison, limit: int = 40) -> str:
    """What a person reads: each unstated change, each stale entry."""
    lines = []
    for f in result.findings[:limit]:
        lines.append(f"difference: {f.case} [{f.key}] {f.change[:300]}")
    if len(result.findings) > limit:
        lines.append(f"... and {len(result.findings) - limit} more differences")
    for e in result.stale:
        lines.append(
            f"stale: the difference {e.unit} states for {e.cases} {e.keys} "
            "was not observed; remove it from INTENDED_DIFFERENCES.toml"
        )
    lines.append(
        f"drop-in check: {result.compared} values compared, {result.allowed} "
        f"changes stated by units, {len(result.findings)} not stated, "
        f"{len(result.stale)} stale entries: " + ("ok" if result.ok else "FAIL")
    )
    return "\n".join(lines)
