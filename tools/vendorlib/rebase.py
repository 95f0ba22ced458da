"""Move the pin to a new upstream release with `git rebase --onto`.

The work tree is a `materialize --git` history of the pinned release (branch
`pinned`); the new release is committed as an orphan upstream commit, and `main`
(the units) is rebased onto it: git merges each unit three-way with the old release
as base, drops a unit the release already contains, and stops at a conflict. Per
unit the result is `applied`, `applied with offsets/fuzz` (git merged it; its patch
moved), `applied, merged (see range-diff)` or `already upstream` (dropped), with
`git range-diff` as the report. A conflict changes nothing in `upstream_patches/`:
resolve it in the work tree, `git rebase --continue`, and run the command again.
Only a complete rebase rewrites the units, `UPSTREAM.toml` and `CHANGELOG.md`.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from .errors import VendorError
from .git import git
from .gitwork import BASE_SUBJECT_PREFIX, commit_release, export, materialize_git
from .pin import load_pin, patches_dir, pinned_tree
from .proc import captured
from .sdist import cache_dir, download, extract, index_file, sha256_of

APPLIED = "applied"
OFFSETS = "applied with offsets/fuzz"
MERGED = "applied, merged (see range-diff)"
UPSTREAM = "already upstream"
_RANGE = re.compile(
    r"^\s*(?:\d+|-):\s+\S+ (?P<kind>[=!<>]) \s*(?:\d+|-):\s+\S+ (?P<name>\S+)"
)


@dataclass
class UnitResult:
    name: str
    status: str


@dataclass
class Release:
    path: Path
    sha256: str
    origin: str


def _cache(sdist: Path, sha256: str) -> None:
    """Keep a given sdist where the pinned build looks for it (by its name), so
    that later commands without ``--sdist`` do not ask the index for a release it
    may not list (a local or pre-release sdist)."""
    dest = cache_dir() / sdist.name
    if dest.is_file() and sha256_of(dest) == sha256:
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    shutil.copyfile(sdist, tmp)
    tmp.replace(dest)


def obtain_release(
    name: str, version: str, sdist: Path | None, sha256: str | None
) -> Release:
    """The new release's sdist, its hash checked; refused (nothing changed) if not."""
    want = sha256.lower() if sha256 else None
    if sdist is not None:
        if not sdist.is_file():
            raise VendorError(f"--sdist {sdist}: no such file")
        got = sha256_of(sdist)
        if want and got != want:
            raise VendorError(
                f"sha256 mismatch for {sdist}: expected {want} (--sha256), got {got}. "
                "Refused: nothing was changed."
            )
        _cache(sdist, got)
        return Release(sdist, got, str(sdist))
    filename = f"{name}-{version}.tar.gz"
    url, listed = index_file(
        name,
        filename,
        f"Download {filename} by hand and pass --sdist PATH --sha256 HEX",
    )
    if not listed and not want:
        raise VendorError(
            f"the index lists no sha256 for {filename}; pass --sha256 HEX. Refused."
        )
    if listed and want and listed.lower() != want:
        raise VendorError(
            f"sha256 mismatch for {filename}: --sha256 {want}, the index lists "
            f"{listed}. Refused: nothing was changed."
        )
    expected = (listed or want or "").lower()
    dest = cache_dir() / filename
    if dest.is_file() and sha256_of(dest) == expected:
        return Release(dest, expected, url)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".new")
    download(url, tmp)
    got = sha256_of(tmp)
    if got != expected:
        tmp.unlink(missing_ok=True)
        raise VendorError(
            f"sha256 mismatch for {url}: expected {expected} (the index), got {got}. "
            "Refused: nothing was changed."
        )
    tmp.replace(dest)
    return Release(dest, got, url)


def update_pin_text(text: str, values: dict[str, str]) -> str:
    """Replace keys of the `[upstream]` table in place, keeping comments and order."""
    out, section = [], None
    key = re.compile(r'^(\s*)(\w+)(\s*=\s*)"[^"]*"(.*)$')
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith("["):
            section = stripped
        elif (
            section == "[upstream]"
            and (m := key.match(line.rstrip("\n")))
            and m[2] in values
        ):
            line = f'{m[1]}{m[2]}{m[3]}"{values[m[2]]}"{m[4]}\n'
        out.append(line)
    return "".join(out)


def changelog_entry(
    name: str, old: str, new: str, sha: str, results: list[UnitResult], tests: str
) -> str:
    parts = []
    for r in results:
        s = f"`{r.name}` {r.status}"
        if r.status == UPSTREAM:
            s += " (dropped from the series)"
        parts.append(s)
    body = "; ".join(parts) if parts else "no units"
    return (
        f"- Rebased onto {name} {new} (from {old}): {body}. "
        f"New sdist sha256 `{sha}`. Unit tests on the result: {tests}.\n"
    )


def add_changelog(path: Path, entry: str) -> None:
    """Insert ``entry`` first under `## [Unreleased]` / `### Upstream pin`."""
    text = path.read_text() if path.is_file() else "# Changelog\n"
    lines = text.splitlines(keepends=True)
    unrel = next(
        (i for i, ln in enumerate(lines) if ln.startswith("## [Unreleased]")), None
    )
    if unrel is None:
        first = next(
            (i for i, ln in enumerate(lines) if ln.startswith("## ")), len(lines)
        )
        lines[first:first] = ["## [Unreleased]\n", "\n"]
        unrel = first
    end = next(
        (i for i in range(unrel + 1, len(lines)) if lines[i].startswith("## ")),
        len(lines),
    )
    pin = next(
        (i for i in range(unrel + 1, end) if lines[i].strip() == "### Upstream pin"),
        None,
    )
    if pin is None:
        lines[unrel + 1 : unrel + 1] = ["\n", "### Upstream pin\n", entry]
    else:
        lines[pin + 1 : pin + 1] = [entry]
    path.write_text("".join(lines))


def run_unit_tests(tree: Path) -> tuple[bool | None, str]:
    """`pytest tests/unit` on the tree, importing its `src/`: (passed, summary),
    counted from pytest's JUnit report."""
    if not (tree / "tests" / "unit").is_dir():
        return None, "no tests/unit in the tree"
    junit = tree / ".rebase-junit.xml"
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "HF_HUB_OFFLINE": "1"}
    args = ["-q", "-p", "no:randomly", f"--junitxml={junit}", "tests/unit"]
    proc = captured([sys.executable, "-m", "pytest", *args], cwd=tree, env=env)
    cases = list(ET.parse(junit).getroot().iter("testcase")) if junit.is_file() else []
    junit.unlink(missing_ok=True)
    if not cases:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        return False, f"pytest reported no tests (rc={proc.returncode}): {tail}"
    kinds = [{ch.tag for ch in tc} & {"failure", "error", "skipped"} for tc in cases]
    counts = {
        "passed": sum(not k for k in kinds),
        "failed": sum(bool(k - {"skipped"}) for k in kinds),
        "skipped": sum(k == {"skipped"} for k in kinds),
    }
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    return proc.returncode == 0 and not counts["failed"], summary


def start(root: Path, work: Path, release: Release, version: str) -> str | None:
    """The pin's history in ``work`` (branch `pinned`), `main` rebased onto the
    new release; the unit in conflict (None: the rebase went through)."""
    pin = load_pin(root)
    old_base = materialize_git(root, pinned_tree(root, work))
    git(work, "branch", "pinned")
    git(work, "checkout", "-q", "--orphan", "release")
    git(work, "rm", "-rfq", "--ignore-unmatch", ".")
    git(work, "clean", "-fdxq")
    extract(release.path, work)
    new_base = commit_release(work, f"{BASE_SUBJECT_PREFIX}{pin.name} {version}")
    git(work, "checkout", "-q", "-f", "main")
    proc = git(work, "rebase", "--onto", new_base, old_base, "main", check=False)
    if proc.returncode == 0:
        return None
    said = (proc.stdout + proc.stderr).strip()
    print("\n".join(f"    {line}" for line in said.splitlines()))
    m = re.search(r"[Cc]ould not apply \w+\.\.\. (\S+)", said)
    return m[1] if m else "?"


def base_of(work: Path, ref: str) -> str:
    """The upstream commit under ``ref``'s units: its root."""
    return git(work, "rev-list", "--max-parents=0", ref).stdout.split()[0]


def results(root: Path, work: Path, stage: Path) -> list[UnitResult]:
    """Each unit's outcome, from `git range-diff` of the pinned and the rebased
    units and whether its exported patch (in ``stage``) moved; prints the report."""
    old, new = base_of(work, "pinned"), base_of(work, "main")
    diff = git(work, "range-diff", "--no-color", f"{old}..pinned", f"{new}..main")
    out = []
    for m in filter(None, map(_RANGE.match, diff.stdout.splitlines())):
        status = {"<": UPSTREAM, "!": MERGED}.get(m["kind"], APPLIED)
        before, after = (d / f"{m['name']}.patch" for d in (patches_dir(root), stage))
        if status == APPLIED and before.is_file() and after.is_file():
            status = OFFSETS if before.read_bytes() != after.read_bytes() else status
        out.append(UnitResult(m["name"], status))
        print(f"  {m['name']}: {status}")
    print("  git range-diff (pinned units .. rebased units):")
    print("\n".join(f"    {line}" for line in diff.stdout.rstrip().splitlines()))
    return out


def resume(work: Path, name: str, version: str) -> None:
    """Refuse a work tree whose rebase is unfinished or onto another release."""
    if any((work / ".git" / d).exists() for d in ("rebase-merge", "rebase-apply")):
        raise VendorError(
            f"{work}: the rebase stopped at a conflict; resolve it there "
            f"(git status), `git -C {work} rebase --continue`, then run this "
            "command again"
        )
    subject = git(work, "log", "-1", "--format=%s", base_of(work, "main")).stdout
    if subject.strip() != f"{BASE_SUBJECT_PREFIX}{name} {version}":
        raise VendorError(f"{work}: main is not rebased onto {name} {version}")


def write_result(
    root: Path, work: Path, release: Release, version: str, tests: str
) -> list[UnitResult]:
    """Export the rebased history, the new pin and the CHANGELOG entry."""
    pdir = patches_dir(root)
    pin = load_pin(root)
    with tempfile.TemporaryDirectory(dir=root, prefix=".rebase-") as tmp:
        stage = Path(tmp) / pdir.name
        shutil.copytree(pdir, stage)
        export(stage.parent, work)
        done = results(root, work, stage)
        toml = stage / "UPSTREAM.toml"
        values = {"version": version, "sdist": release.path.name}
        toml.write_text(
            update_pin_text(toml.read_text(), values | {"sha256": release.sha256})
        )
        new = load_pin(stage.parent)
        if (new.version, new.sha256, new.drop_requires) != (
            version,
            release.sha256,
            pin.drop_requires,
        ):
            raise VendorError(f"{toml}: could not update the pin in place")
        aside = Path(tmp) / "old"
        pdir.rename(aside)
        try:
            shutil.copytree(stage, pdir)
        except OSError:
            shutil.rmtree(pdir, ignore_errors=True)
            aside.rename(pdir)
            raise
    entry = changelog_entry(pin.name, pin.version, version, release.sha256, done, tests)
    add_changelog(root / "CHANGELOG.md", entry)
    return done


def rebase(
    root: Path,
    version: str,
    sdist: Path | None = None,
    sha256: str | None = None,
    work: Path | None = None,
    run_tests: bool = True,
) -> int:
    """Rebase the series onto ``version``; print the per-unit report; exit code."""
    pin = load_pin(root)
    if version == pin.version:
        raise VendorError(f"the pin is already {pin.name} {version}")
    work = work or root / "build" / f"rebase-{version}"
    again = (work / ".git").is_dir()
    if not again and work.exists() and any(work.iterdir()):
        raise VendorError(f"{work}: exists and is not empty; remove it or pass --work")
    release = obtain_release(pin.name, version, sdist, sha256)
    print(f"{pin.name} {pin.version} -> {version}: sdist {release.origin}")
    print(f"  sha256 {release.sha256} ok")
    if again:
        resume(work, pin.name, version)
    elif (unit := start(root, work, release, version)) is not None:
        print(f"  {unit}: conflict")
        print(
            f"conflict in unit {unit}; upstream_patches/ is unchanged. Next: resolve "
            f"it in {work} (git status), `git -C {work} rebase --continue`, then "
            "run this command again."
        )
        return 1
    passed: bool | None = None
    summary = "not run (--no-tests)"
    if run_tests:
        passed, summary = run_unit_tests(work)
        word = {True: "passed", False: "FAILED", None: "none"}[passed]
        summary = f"{word} ({summary})"
        print(f"  unit tests (pytest tests/unit on the rebased tree): {summary}")
    done = write_result(root, work, release, version, summary)
    dropped = [r.name for r in done if r.status == UPSTREAM]
    print(
        f"pin moved to {pin.name} {version}; units refreshed"
        + (f"; dropped (already upstream): {', '.join(dropped)}" if dropped else "")
        + f"; CHANGELOG.md updated; work tree: {work}"
    )
    return 1 if passed is False else 0
