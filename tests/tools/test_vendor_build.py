"""The build: pinned sdist + units -> installable distribution, and its failures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import run, snapshot, vendor
from vendorlib.pin import load_series
from vendorlib.pytest_run import run_pytest, tree_env
from vendorlib.unit_files import own_test_files, tree_test_files


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


def first_unit_with_patch(project: Path):
    units = [u for u in load_series(project) if u.patch.is_file()]
    assert units, "the series has no unit with a changes.patch"
    return units[0]


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
    unit = first_unit_with_patch(project_copy)
    lines = unit.patch.read_text().splitlines(keepends=True)
    # Break the first context line of the first hunk.
    first_hunk = next(i for i, line in enumerate(lines) if line.startswith("@@"))
    ctx = next(i for i in range(first_hunk + 1, len(lines)) if lines[i].startswith(" "))
    lines[ctx] = " # this line is not in upstream\n"
    unit.patch.write_text("".join(lines))
    file = next(
        line.split(" b/")[1].strip() for line in lines if line.startswith("diff --git")
    )
    out = pip_install_target(project_copy, tmp_path / "target", upstream_sdist)
    assert f"unit {unit.name}" in out
    assert f"file {file}, hunk 1 of" in out
    assert "@@ -" in out


def test_files_overwriting_upstream_stop_the_build(
    project_copy, tmp_path, upstream_sdist
):
    unit = load_series(project_copy)[0]
    dest = unit.files_dir / "src" / "speculators" / "config.py"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text("# replaces upstream's config.py\n")
    out = pip_install_target(project_copy, tmp_path / "target", upstream_sdist)
    assert f"unit {unit.name}: files/src/speculators/config.py would overwrite" in out
    assert "changes.patch" in out  # names the fix


def test_check_proves_the_series(project_copy, upstream_sdist):
    proc = vendor(project_copy, "check", "--sdist", str(upstream_sdist))
    for unit in load_series(project_copy):
        assert f"{unit.name}: applies" in proc.stdout
    assert "byte for byte" in proc.stdout


def test_materialize_git_then_export_is_byte_for_byte(
    project_copy, tmp_path, upstream_sdist
):
    before = snapshot(project_copy / "upstream_patches")
    work = tmp_path / "work"
    sdist = ["--sdist", str(upstream_sdist)]
    vendor(project_copy, "materialize", "--git", str(work), *sdist)
    log = run(["git", "log", "--format=%s", "--reverse"], cwd=work).stdout.split("\n")
    assert log[0] == "upstream: speculators 0.9.0"
    assert log[1:-1] == [u.name for u in load_series(project_copy)]
    vendor(project_copy, "export", str(work))
    assert snapshot(project_copy / "upstream_patches") == before


def test_edit_a_unit_and_add_one_through_git(project_copy, tmp_path, upstream_sdist):
    work = tmp_path / "work"
    sdist = ["--sdist", str(upstream_sdist)]
    vendor(project_copy, "materialize", "--git", str(work), *sdist)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    # A new unit on top: one new file and one change to an upstream file.
    (work / "src/speculators/utils/extra_helper.py").write_text('"""New."""\n')
    main_py = work / "src/speculators/__main__.py"
    main_py.write_text(main_py.read_text() + "# touched by 0099\n")
    run([*git, "add", "-A"], cwd=work)
    run([*git, "commit", "-qm", "0099-example"], cwd=work)
    vendor(project_copy, "export", str(work))
    unit = project_copy / "upstream_patches" / "0099-example"
    assert (unit / "files/src/speculators/utils/extra_helper.py").read_text() == (
        '"""New."""\n'
    )
    patch = (unit / "changes.patch").read_text()
    assert "+# touched by 0099" in patch
    assert "src/speculators/__main__.py" in patch
    assert (unit / "PR.md").is_file()
    series = (project_copy / "upstream_patches/series").read_text().split()
    assert series[-1] == "0099-example"
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
