"""The build: pinned sdist + units -> installable distribution, and its failures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import ROOT, first_changed_hunk, run, snapshot, vendor
from seriescheck.pytest_run import run_pytest, tree_env
from seriescheck.unit_files import own_test_files, tree_test_files
from vendorlib.build import upstream_dev_requirement, vendored_dir
from vendorlib.lint import find_tool, not_upstreams_version
from vendorlib.pin import Unit, load_series


def pip_install_target(project: Path, target: Path, sdist: Path) -> str:
    """`pip install --target` of ``project`` expected to fail; return its output."""
    proc = run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--target",
            str(target),
            str(project),
        ],
        env={"SPECULATORS_KIMI_UPSTREAM_SDIST": str(sdist)},
        check=False,
    )
    assert proc.returncode != 0, "the build was expected to fail"
    assert not (target / "speculators").exists(), "a failed build installed files"
    return proc.stdout + proc.stderr


def test_hash_mismatch_stops_the_build(project_copy, tmp_path, upstream_sdist):
    bad = tmp_path / upstream_sdist.name
    bad.write_bytes(upstream_sdist.read_bytes() + b"\0")
    out = pip_install_target(project_copy, tmp_path / "target", bad)
    assert "sha256 mismatch" in out
    assert "speculators-0.9.0.tar.gz" in out
    assert "SPECULATORS_KIMI_UPSTREAM_SDIST" in out  # names the fix


def test_unit_that_does_not_apply_names_unit_file_and_hunk(
    project_copy, tmp_path, upstream_sdist
):
    unit, hunk = first_changed_hunk(project_copy)
    lines = unit.text().splitlines(keepends=True)
    # Break the first context line of that hunk.
    at = lines.index(hunk.header + "\n")
    ctx = next(i for i in range(at + 1, len(lines)) if lines[i].startswith(" "))
    lines[ctx] = " # this line is not in upstream\n"
    unit.path.write_text("".join(lines))
    out = pip_install_target(project_copy, tmp_path / "target", upstream_sdist)
    assert f"unit {unit.name}" in out
    assert f"file {hunk.file}, hunk {hunk.index} of" in out
    assert hunk.header in out


def test_a_new_file_overwriting_upstream_stops_the_build(
    project_copy, tmp_path, upstream_sdist
):
    unit = load_series(project_copy)[0]
    with unit.path.open("a") as f:
        f.write(
            "diff --git a/src/speculators/config.py b/src/speculators/config.py\n"
            "new file mode 100644\n--- /dev/null\n+++ b/src/speculators/config.py\n"
            "@@ -0,0 +1 @@\n+# replaces upstream's config.py\n"
        )
    out = pip_install_target(project_copy, tmp_path / "target", upstream_sdist)
    assert f"unit {unit.name}" in out
    assert "file src/speculators/config.py: the unit adds it, but the upstream" in out


def test_check_proves_the_series(project_copy, upstream_sdist):
    proc = vendor(project_copy, "check", "--sdist", str(upstream_sdist))
    for unit in load_series(project_copy):
        assert f"{unit.name}: applies" in proc.stdout
    # Upstream's linters, mypy included, on every unit's files.
    for tool in ("ruff check", "ruff format --check", "mypy --check-untyped-defs"):
        assert f"upstream lint, {tool}: pass" in proc.stdout, proc.stdout
    assert "git am of the series (materialize --git)" in proc.stdout


@pytest.mark.parametrize("tool", ["ruff", "mypy"])
def test_units_are_linted_with_upstreams_pinned_linters(tmp_path, tool):
    """Another ruff formats and flags otherwise (0.17 splits a line that upstream's
    0.15 joins), so the lint takes only the versions upstream's dev extra pins."""
    tree = vendored_dir(ROOT)
    pinned = upstream_dev_requirement(tree, tool)
    installed = find_tool(tool)
    assert installed is not None
    assert not_upstreams_version(installed, tool, tree) is None  # the test extra's
    other = tmp_path / tool
    other.write_text(f"#!/bin/sh\necho {tool} 99.0.1\n")
    other.chmod(0o755)
    problem = not_upstreams_version([str(other)], tool, tree)
    assert problem is not None
    assert f"{tool} 99.0.1" in problem
    assert f"pip install '{pinned}'" in problem


def test_every_units_pr_text_has_its_sections(tmp_path):
    """`tools/vendor check` refuses a unit whose PR text lacks a section (the
    ones `tools/vendor pr` fills the upstream template from)."""
    lacking = {u.name: u.pr_text_problems() for u in load_series(ROOT)}
    assert {name: found for name, found in lacking.items() if found} == {}
    unit = Unit("0999-x", tmp_path / "0999-x.patch")
    unit.path.write_text(
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "Subject: 0999-x\n\n# Title\n\n## Problem\n\nWhy.\n\n## Change\n\n"
        "## Risk\n\nLow.\n\ndiff --git a/x b/x\n"
    )
    assert unit.pr_text_problems() == [
        "its PR text's `## Change` is empty",
        "its PR text has no `## Tests`",
    ]


def test_materialize_export_and_add_a_unit_through_git(
    project_copy, tmp_path, upstream_sdist
):
    before = snapshot(project_copy / "upstream_patches")
    work = tmp_path / "work"
    sdist = ["--sdist", str(upstream_sdist)]
    vendor(project_copy, "materialize", "--git", str(work), *sdist)
    log = run(["git", "log", "--format=%s", "--reverse"], cwd=work).stdout.split("\n")
    assert log[0] == "upstream: speculators 0.9.0"
    assert log[1:-1] == [u.name for u in load_series(project_copy)]
    vendor(project_copy, "export", str(work))  # unchanged: the same bytes
    assert snapshot(project_copy / "upstream_patches") == before
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    # A new unit on top: one new file and one change to an upstream file.
    (work / "src/speculators/utils/extra_helper.py").write_text('"""New."""\n')
    main_py = work / "src/speculators/__main__.py"
    main_py.write_text(main_py.read_text() + "# touched by 0099\n")
    # Not committed yet: export reads commits, so it refuses rather than drop them
    refused = vendor(project_copy, "export", str(work), check=False)
    assert refused.returncode != 0
    assert "uncommitted changes (src/speculators/__main__.py," in refused.stderr
    assert snapshot(project_copy / "upstream_patches") == before
    run([*git, "add", "-A"], cwd=work)
    run([*git, "commit", "-qm", "0099-example"], cwd=work)
    # A rebase stopped at an earlier unit (HEAD has only the units before it):
    # export would have deleted the later ones
    editor = {"GIT_SEQUENCE_EDITOR": "sed -i '1s/^pick/edit/'"}
    run([*git, "rebase", "-qi", "HEAD~2"], cwd=work, env=editor)
    refused = vendor(project_copy, "export", str(work), check=False)
    assert "a git rebase (or am) is stopped midway" in refused.stderr
    assert snapshot(project_copy / "upstream_patches") == before
    run([*git, "rebase", "--continue"], cwd=work)
    vendor(project_copy, "export", str(work))
    unit = load_series(project_copy)[-1]
    assert unit.name == "0099-example"
    assert unit.files() == {
        "src/speculators/__main__.py": "M",
        "src/speculators/utils/extra_helper.py": "A",
    }
    patch = unit.text()
    assert '+"""New."""' in patch and "+# touched by 0099" in patch
    assert "From: speculators-kimi vendor" in patch  # not the committer's name
    assert unit.message().startswith("# 0099-example\n\n## Problem")  # to fill in
    # The exported unit materializes to the same tree.
    tree = tmp_path / "tree"
    vendor(project_copy, "materialize", str(tree), "--sdist", str(upstream_sdist))
    assert (tree / "src/speculators/__main__.py").read_text() == main_py.read_text()


@pytest.mark.slow
def test_unit_tests_pass_on_the_materialized_tree(
    project_copy, tmp_path, upstream_sdist
):
    """Every unit's tests, on the whole series' tree (what `pip install` builds and
    what `test-series --skip-installed` leaves to this test): each test file a unit
    ships is collected and its tests pass."""
    tree = tmp_path / "tree"
    vendor(project_copy, "materialize", str(tree), "--sdist", str(upstream_sdist))
    files = tree_test_files(tree)
    shipped = sorted({f for u in load_series(project_copy) for f in own_test_files(u)})
    assert files == shipped and files, (files, shipped)
    report = run_pytest(
        sys.executable, tree, ["tests/unit"], tree_env(tree / "src"), timeout=1200
    )
    assert report.rc == 0, report.tail
    assert not report.ids("failed"), report.tail
    by_file = {f: [o for o in report.outcomes if o.file == f] for f in files}
    empty = [f for f, tests in by_file.items() if not tests]
    assert not empty, f"collected nothing from {empty}:\n{report.tail}"
    assert len(report.ids("passed")) >= 2 * len(files), report.summary()
