"""Move the pin to a new upstream release: replay every unit with a three-way merge.

The work tree is a `materialize --git` history of the *old* release (base commit +
one commit per unit). The new release becomes an orphan commit of its own, and each
unit commit is cherry-picked onto it, so git merges with the old release as base.
Per unit the result is one of `applied`, `applied with offsets/fuzz`,
`already upstream` (the pick is empty; the unit is dropped) or `conflict` (stop,
leave the work tree with conflict markers, change nothing in `upstream_patches/`).
Only a complete replay rewrites the units, `UPSTREAM.toml` and `CHANGELOG.md`.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .errors import VendorError
from .gitwork import commit_all, export, git, materialize_git, unit_commits
from .pin import load_pin, load_series, patches_dir
from .pytest_run import run_pytest, tree_env
from .sdist import cache_dir, download, extract, index_file, obtain, sha256_of
from .units import Hunk, failed_hunks, run_git

APPLIED = "applied"
OFFSETS = "applied with offsets/fuzz"
UPSTREAM = "already upstream"
CONFLICT = "conflict"
NOT_TRIED = "not tried (an earlier unit conflicts)"


@dataclass
class UnitResult:
    name: str
    status: str
    detail: list[str] = field(default_factory=list)


@dataclass
class Release:
    path: Path
    sha256: str
    origin: str


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


def apply_check(tree: Path, patch: str) -> tuple[bool, str]:
    """`git apply --check -v` of ``patch`` on ``tree``: (applies, git's messages)."""
    if not patch.strip():
        return True, ""
    with tempfile.NamedTemporaryFile("w", suffix=".patch", delete=False) as f:
        f.write(patch)
    try:
        proc = run_git(tree, "apply", "--check", "-v", f.name)
    finally:
        Path(f.name).unlink()
    return proc.returncode == 0, proc.stdout + proc.stderr


def commit_patch(tree: Path, sha: str) -> str:
    return git(tree, "diff", "--full-index", "--binary", "--no-renames", f"{sha}^", sha)


def _marker_ranges(path: Path) -> list[str]:
    """Line ranges of the conflict blocks (``<<<<<<<`` .. ``>>>>>>>``) in ``path``."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except (FileNotFoundError, IsADirectoryError):
        return []
    out, start = [], None
    for i, line in enumerate(lines, start=1):
        if line.startswith("<<<<<<<"):
            start = i
        elif line.startswith(">>>>>>>") and start is not None:
            out.append(f"lines {start}-{i}")
            start = None
    return out


_KINDS = {
    "UU": "both modified",
    "AA": "added by the unit and by the new release",
    "DU": "deleted by the new release, modified by the unit",
    "UD": "modified by the new release, deleted by the unit",
    "AU": "added by the new release",
    "UA": "added by the unit",
    "DD": "deleted by both",
}


def describe_conflict(tree: Path, patch: str, check_out: str) -> list[str]:
    """Files and hunks of a stopped cherry-pick, in the unit's and the tree's terms."""
    lines: list[str] = []
    status = git(tree, "status", "--porcelain", "--untracked-files=no")
    failed: dict[str, list[Hunk]] = {}
    for file, _, hunk in failed_hunks(patch, check_out):
        if hunk is not None:
            failed.setdefault(file, []).append(hunk)
    for row in status.splitlines():
        code, path = row[:2], row[3:]
        if code not in _KINDS:
            continue
        lines.append(f"  file {path}: {_KINDS[code]}")
        for h in failed.get(path, []):
            lines.append(
                f"    unit hunk {h.index} of {h.count} "
                f"(old upstream line {h.old_start}): {h.header}"
            )
        ranges = _marker_ranges(tree / path)
        if ranges:
            lines.append(f"    conflict markers at {', '.join(ranges)}")
    return lines


def replay(tree: Path, commits: list[tuple[str, str]]) -> list[UnitResult]:
    """Cherry-pick each unit commit onto HEAD; stop at the first conflict."""
    results: list[UnitResult] = []
    for i, (sha, name) in enumerate(commits):
        patch = commit_patch(tree, sha)
        clean, check_out = apply_check(tree, patch)
        pick = run_git(tree, "cherry-pick", "--no-commit", sha)
        conflicted = git(tree, "diff", "--name-only", "--diff-filter=U").split()
        if pick.returncode != 0 or conflicted:
            detail = describe_conflict(tree, patch, check_out)
            if not detail:
                detail = ["  " + ln for ln in pick.stderr.strip().splitlines()]
            rest = " ".join(s for s, _ in commits[i + 1 :])
            detail += [
                f"The work tree {tree} holds the conflict (markers in the files).",
                "Resolve it there, then: git add -A && "
                f"git commit -C {sha}"
                + (f" && git cherry-pick {rest}" if rest else "")
                + f"; then `tools/vendor export {tree}`, or rework the unit and "
                "rebase again.",
            ]
            results.append(UnitResult(name, CONFLICT, detail))
            results += [UnitResult(n, NOT_TRIED) for _, n in commits[i + 1 :]]
            return results
        if run_git(tree, "diff", "--cached", "--quiet").returncode == 0:
            results.append(
                UnitResult(name, UPSTREAM, ["  the new release contains the change"])
            )
            continue
        git(tree, "commit", "-q", "--allow-empty", "-C", sha)
        shifted = re.findall(r"Hunk #\d+ succeeded at .*", check_out)
        if clean and not shifted:
            results.append(UnitResult(name, APPLIED))
        elif clean:
            results.append(UnitResult(name, OFFSETS, ["  " + s for s in shifted]))
        else:
            results.append(
                UnitResult(
                    name,
                    OFFSETS,
                    ["  the patch needs fuzz; git's three-way merge applied it"],
                )
            )
    return results


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
    """`pytest tests/unit` on the tree with PYTHONPATH=src: (passed, summary)."""
    if not (tree / "tests" / "unit").is_dir():
        return None, "no tests/unit in the tree"
    report = run_pytest(sys.executable, tree, ["tests/unit"], tree_env(tree / "src"))
    if not report.outcomes:
        return False, f"pytest reported no tests (rc={report.rc}): {report.tail}"
    ok = report.rc == 0 and not report.ids("failed")
    return ok, report.summary()


def _write_result(
    root: Path, tree: Path, release: Release, version: str, results: list[UnitResult]
) -> None:
    """Export the rebased history and the new pin into `upstream_patches/`."""
    pdir = patches_dir(root)
    with tempfile.TemporaryDirectory(dir=root, prefix=".rebase-") as tmp:
        stage = Path(tmp)
        shutil.copytree(pdir, stage / pdir.name)
        export(stage, tree)
        for r in results:
            if r.status == UPSTREAM:
                shutil.rmtree(stage / pdir.name / r.name, ignore_errors=True)
        toml = stage / pdir.name / "UPSTREAM.toml"
        pin = load_pin(root)
        toml.write_text(
            update_pin_text(
                toml.read_text(),
                {
                    "version": version,
                    "sdist": release.path.name,
                    "sha256": release.sha256,
                },
            )
        )
        new = load_pin(stage)
        if (new.version, new.sha256, new.drop_requires) != (
            version,
            release.sha256,
            pin.drop_requires,
        ):
            raise VendorError(f"{toml}: could not update the pin in place")
        load_series(stage)
        aside = Path(tmp) / "old"
        pdir.rename(aside)
        try:
            shutil.copytree(stage / pdir.name, pdir)
        except OSError:
            shutil.rmtree(pdir, ignore_errors=True)
            aside.rename(pdir)
            raise


def rebase(
    root: Path,
    version: str,
    sdist: Path | None = None,
    sha256: str | None = None,
    work: Path | None = None,
    run_tests: bool = True,
) -> int:
    """Replay the series onto ``version``; print the per-unit report; exit code."""
    pin = load_pin(root)
    if version == pin.version:
        raise VendorError(f"the pin is already {pin.name} {version}")
    work = work or root / "build" / f"rebase-{version}"
    if work.exists() and any(work.iterdir()):
        raise VendorError(f"{work}: exists and is not empty; remove it or pass --work")
    units = load_series(root)
    release = obtain_release(pin.name, version, sdist, sha256)
    old = obtain(pin.name, pin.version, pin.sdist, pin.sha256)
    print(f"{pin.name} {pin.version} -> {version}: sdist {release.origin}")
    print(f"  sha256 {release.sha256} ok")
    extract(old, work)
    materialize_git(root, work, units)
    commits = unit_commits(work)
    git(work, "checkout", "-q", "--orphan", "rebased")
    git(work, "rm", "-rfq", "--ignore-unmatch", ".")
    git(work, "clean", "-fdxq")
    extract(release.path, work)
    git(work, "add", "-A", "-f")
    commit_all(work, f"upstream: {pin.name} {version}")
    results = replay(work, commits)
    for r in results:
        print(f"  {r.name}: {r.status}")
        for line in r.detail:
            print(f"    {line.strip()}" if line.startswith("  ") else f"    {line}")
    if any(r.status == CONFLICT for r in results):
        bad = next(r for r in results if r.status == CONFLICT)
        print(
            f"conflict in unit {bad.name}; upstream_patches/ is unchanged; "
            f"work tree: {work}"
        )
        return 1
    passed: bool | None = None
    summary = "not run (--no-tests)"
    if run_tests:
        passed, summary = run_unit_tests(work)
        word = {True: "passed", False: "FAILED", None: "none"}[passed]
        summary = f"{word} ({summary})"
        print(f"  unit tests (pytest tests/unit on the rebased tree): {summary}")
    _write_result(root, work, release, version, results)
    add_changelog(
        root / "CHANGELOG.md",
        changelog_entry(
            pin.name, pin.version, version, release.sha256, results, summary
        ),
    )
    dropped = [r.name for r in results if r.status == UPSTREAM]
    print(
        f"pin moved to {pin.name} {version}; units refreshed"
        + (f"; dropped (already upstream): {', '.join(dropped)}" if dropped else "")
        + f"; CHANGELOG.md updated; work tree: {work}"
    )
    return 1 if passed is False else 0
