"""`tools/vendor rebase`: synthetic next releases built from the pinned sdist."""

from __future__ import annotations

import hashlib
import re
import shutil
import tarfile
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import extract_tar, first_changed_hunk, run, snapshot, vendor
from vendorlib.pin import load_series

NEW = "0.9.1"


def make_release(
    pinned: Path, dest: Path, edit: Callable[[Path], None], version: str = NEW
) -> tuple[Path, str]:
    """The pinned sdist, edited by ``edit(tree)``, re-tarred as ``version``."""
    work = dest / "release-src"
    with tarfile.open(pinned) as tf:
        extract_tar(tf, work)
    (old_top,) = work.iterdir()
    old = re.sub(r"^speculators-", "", old_top.name)
    edit(old_top)
    for rel in ("PKG-INFO", "src/speculators.egg-info/PKG-INFO"):
        p = old_top / rel
        if p.is_file():
            p.write_text(
                p.read_text().replace(f"Version: {old}", f"Version: {version}")
            )
    ver = old_top / "src/speculators/version.py"
    if ver.is_file():
        ver.write_text(ver.read_text().replace(old, version))
    top = old_top.rename(work / f"speculators-{version}")
    out = dest / f"speculators-{version}.tar.gz"
    with tarfile.open(out, "w:gz") as tf:
        tf.add(top, arcname=top.name)
    shutil.rmtree(work)
    return out, hashlib.sha256(out.read_bytes()).hexdigest()


def rebase(project: Path, sdist: Path, sha: str, work: Path, *extra: str):
    return vendor(
        project,
        "rebase",
        "--to",
        NEW,
        "--sdist",
        str(sdist),
        "--sha256",
        sha,
        "--work",
        str(work),
        *extra,
        check=False,
        env={"XDG_CACHE_HOME": str(work.parent / "cache")},
    )


def status_of(out: str, unit: str) -> str:
    m = re.search(rf"^  {re.escape(unit)}: (.+)$", out, re.M)
    assert m, f"no result for {unit} in:\n{out}"
    return m[1]


def untouched_file(project: Path, tree_names: list[str]) -> str:
    touched = {f for u in load_series(project) for f in u.files()}
    return next(n for n in tree_names if n not in touched)


@pytest.mark.slow
def test_unrelated_change_applies_and_moves_the_pin(
    project_copy, tmp_path, upstream_sdist
):
    """The success path: applied, pin + CHANGELOG updated. (The units' tests on
    the rebased tree are skipped here: they are those of the series' last tree,
    which tests/tools/test_vendor_build.py runs; running them is
    test_rebase_runs_the_units_tests_of_the_tree's.)"""
    readme = untouched_file(project_copy, ["README.md", "setup.py", "MANIFEST.in"])

    def edit(tree: Path) -> None:
        (tree / readme).write_text((tree / readme).read_text() + "\nNew release.\n")

    sdist, sha = make_release(upstream_sdist, tmp_path, edit)
    before = snapshot(project_copy / "upstream_patches")
    units = [u.name for u in load_series(project_copy)]
    proc = rebase(project_copy, sdist, sha, tmp_path / "work", "--no-tests")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in units:
        assert status_of(proc.stdout, name) == "applied"
    pin_text = (project_copy / "upstream_patches/UPSTREAM.toml").read_text()
    pin = tomllib.loads(pin_text)
    assert pin["upstream"]["version"] == NEW
    assert pin["upstream"]["sha256"] == sha
    assert pin["upstream"]["sdist"] == sdist.name
    assert pin["dependencies"]["drop"]  # the table and its comments are kept
    assert "# Upstream Requires-Dist entries we do not pass on" in pin_text
    changelog = (project_copy / "CHANGELOG.md").read_text()
    unreleased = changelog.split("## [Unreleased]", 1)[1]
    assert f"- Rebased onto speculators {NEW} (from 0.9.0)" in unreleased
    assert "not run (--no-tests)" in unreleased.split("Rebased onto", 1)[1]
    # Unchanged units export byte for byte; only the pin moved.
    after = snapshot(project_copy / "upstream_patches")
    assert {k for k in after if before[k] != after[k]} == {"UPSTREAM.toml"}
    # The next build vendors the new release (its PKG-INFO, hence its Requires-Dist),
    # found where the rebase cached it: no index lists this fabricated release.
    tree = tmp_path / "tree"
    cache = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    vendor(project_copy, "materialize", str(tree), env=cache)
    assert f"Version: {NEW}" in (tree / "PKG-INFO").read_text()


def test_shifted_context_is_applied_with_offsets(
    project_copy, tmp_path, upstream_sdist
):
    unit, first_hunk = first_changed_hunk(project_copy, top_untouched=True)
    file = first_hunk.file

    def edit(tree: Path) -> None:
        p = tree / file
        p.write_text("# one\n# two\n# three\n" + p.read_text())

    sdist, sha = make_release(upstream_sdist, tmp_path, edit)
    proc = rebase(project_copy, sdist, sha, tmp_path / "work", "--no-tests")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert status_of(proc.stdout, unit.name) == "applied with offsets/fuzz"
    assert "git range-diff" in proc.stdout
    assert "not run (--no-tests)" in (project_copy / "CHANGELOG.md").read_text()
    # The refreshed patch has the new line numbers: it applies without offsets.
    (moved,) = [u for u in load_series(project_copy) if u.name == unit.name]
    hunk = next(h for h in moved.hunks() if h.file == file)
    assert hunk.old_start == first_hunk.old_start + 3


def test_change_already_upstream_is_dropped(project_copy, tmp_path, upstream_sdist):
    first = load_series(project_copy)[0]

    def edit(tree: Path) -> None:
        run(["git", "apply", str(first.path)], cwd=tree)

    sdist, sha = make_release(upstream_sdist, tmp_path, edit)
    proc = rebase(project_copy, sdist, sha, tmp_path / "work", "--no-tests")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert status_of(proc.stdout, first.name) == "already upstream"
    series = (project_copy / "upstream_patches/series").read_text().split()
    assert first.name not in series
    assert not (project_copy / "upstream_patches" / f"{first.name}.patch").exists()
    assert (
        "already upstream (dropped from the series)"
        in (project_copy / "CHANGELOG.md").read_text()
    )


def test_conflict_stops_then_the_same_command_finishes(
    project_copy, tmp_path, upstream_sdist
):
    unit, hunk = first_changed_hunk(project_copy)
    body = []
    for line in unit.text().split(hunk.header + "\n", 1)[1].splitlines():
        if line.startswith(("@@", "diff --git")):
            break
        body.append(line)
    # The first line the unit removes (or the context line before its first add).
    idx = next(
        (i for i, ln in enumerate(body) if ln.startswith("-")),
        next(i for i, ln in enumerate(body) if ln.startswith("+")) - 1,
    )
    target = body[idx][1:]
    assert target.strip(), "pick a non-empty line"

    def edit(tree: Path) -> None:
        p = tree / hunk.file
        src = p.read_text()
        assert target + "\n" in src
        p.write_text(src.replace(target + "\n", target + "  # changed upstream\n", 1))

    sdist, sha = make_release(upstream_sdist, tmp_path, edit)
    before = snapshot(project_copy / "upstream_patches")
    changelog = (project_copy / "CHANGELOG.md").read_bytes()
    work = tmp_path / "work"
    proc = rebase(project_copy, sdist, sha, work, "--no-tests")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert status_of(proc.stdout, unit.name) == "conflict"
    assert f"Merge conflict in {hunk.file}" in proc.stdout  # git's own words
    assert "rebase --continue`, then run this command again" in proc.stdout
    assert snapshot(project_copy / "upstream_patches") == before
    assert (project_copy / "CHANGELOG.md").read_bytes() == changelog
    assert "<<<<<<<" in (work / hunk.file).read_text()
    # Resolved as the unit had it, the rebase continues; the same command ends it.
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    run([*git, "checkout", "--theirs", hunk.file], cwd=work)
    run([*git, "add", hunk.file], cwd=work)
    run([*git, "rebase", "--continue"], cwd=work, env={"GIT_EDITOR": "true"})
    proc = rebase(project_copy, sdist, sha, work, "--no-tests")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert status_of(proc.stdout, unit.name) == "applied, merged (see range-diff)"
    assert load_series(project_copy)  # the series is whole, the pin moved
    pin = tomllib.loads((project_copy / "upstream_patches/UPSTREAM.toml").read_text())
    assert pin["upstream"]["version"] == NEW


def test_release_adding_the_units_new_file_is_a_conflict(
    project_copy, tmp_path, upstream_sdist
):
    unit = next((u for u in load_series(project_copy) if u.new_files()), None)
    if unit is None:
        pytest.skip("no unit adds a file")
    rel = unit.new_files()[0]

    def edit(tree: Path) -> None:
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text('"""Upstream\'s own version of this file."""\n')

    sdist, sha = make_release(upstream_sdist, tmp_path, edit)
    before = snapshot(project_copy / "upstream_patches")
    work = tmp_path / "work"
    proc = rebase(project_copy, sdist, sha, work, "--no-tests")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert status_of(proc.stdout, unit.name) == "conflict"
    assert f"CONFLICT (add/add): Merge conflict in {rel}" in proc.stdout
    content = (work / rel).read_text()
    assert "<<<<<<<" in content and "Upstream's own version" in content
    assert snapshot(project_copy / "upstream_patches") == before


def test_hash_mismatch_is_refused(project_copy, tmp_path, upstream_sdist):
    sdist, sha = make_release(upstream_sdist, tmp_path, lambda tree: None)
    before = snapshot(project_copy)
    work = tmp_path / "work"
    proc = rebase(project_copy, sdist, "0" * 64, work)
    assert proc.returncode == 2
    assert "sha256 mismatch" in proc.stderr and "Refused" in proc.stderr
    assert sha in proc.stderr
    assert snapshot(project_copy) == before
    assert not work.exists()


def test_rebase_runs_the_units_tests_of_the_tree(tmp_path):
    """What rebase reports for the rebased tree's `tests/unit`, imported from its
    `src/`: passed, failed (with the counts) or none."""
    from vendorlib.rebase import run_unit_tests

    tree = tmp_path / "tree"
    (tree / "src" / "speculators").mkdir(parents=True)
    (tree / "src" / "speculators" / "__init__.py").write_text("VALUE = 2\n")
    assert run_unit_tests(tree) == (None, "no tests/unit in the tree")
    (tree / "tests" / "unit").mkdir(parents=True)
    test = tree / "tests" / "unit" / "test_value.py"
    test.write_text(
        "import speculators\n\n\ndef test_value():\n"
        "    assert speculators.VALUE == 2\n\n\ndef test_more():\n    pass\n"
    )
    assert run_unit_tests(tree) == (True, "2 passed")
    (tree / "src" / "speculators" / "__init__.py").write_text("VALUE = 3\n")
    assert run_unit_tests(tree) == (False, "1 passed, 1 failed")
