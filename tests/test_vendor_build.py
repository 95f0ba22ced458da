"""The build: pinned sdist + units -> installable distribution, and its failures."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from helpers import ROOT, run

sys.path.insert(0, str(ROOT / "tools"))
from vendorlib.pin import load_series


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
    proc = run(
        [
            sys.executable,
            str(project_copy / "tools" / "vendor"),
            "check",
            "--sdist",
            str(upstream_sdist),
        ]
    )
    for unit in load_series(project_copy):
        assert f"{unit.name}: applies" in proc.stdout
    assert "byte for byte" in proc.stdout


def snapshot(directory: Path) -> dict[str, bytes]:
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def test_materialize_git_then_export_is_byte_for_byte(
    project_copy, tmp_path, upstream_sdist
):
    vendor = [sys.executable, str(project_copy / "tools" / "vendor")]
    before = snapshot(project_copy / "upstream_patches")
    work = tmp_path / "work"
    run([*vendor, "materialize", "--git", str(work), "--sdist", str(upstream_sdist)])
    log = run(["git", "log", "--format=%s", "--reverse"], cwd=work).stdout.split("\n")
    assert log[0] == "upstream: speculators 0.9.0"
    assert log[1:-1] == [u.name for u in load_series(project_copy)]
    run([*vendor, "export", str(work)])
    assert snapshot(project_copy / "upstream_patches") == before


def test_edit_a_unit_and_add_one_through_git(project_copy, tmp_path, upstream_sdist):
    vendor = [sys.executable, str(project_copy / "tools" / "vendor")]
    work = tmp_path / "work"
    run([*vendor, "materialize", "--git", str(work), "--sdist", str(upstream_sdist)])
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    # A new unit on top: one new file and one change to an upstream file.
    (work / "src/speculators/utils/extra_helper.py").write_text('"""New."""\n')
    main_py = work / "src/speculators/__main__.py"
    main_py.write_text(main_py.read_text() + "# touched by 0099\n")
    run([*git, "add", "-A"], cwd=work)
    run([*git, "commit", "-qm", "0099-example"], cwd=work)
    run([*vendor, "export", str(work)])
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
    run([*vendor, "materialize", str(tree), "--sdist", str(upstream_sdist)])
    assert (tree / "src/speculators/__main__.py").read_text() == main_py.read_text()


def test_unit_tests_pass_on_the_materialized_tree(
    project_copy, tmp_path, upstream_sdist
):
    tree = tmp_path / "tree"
    run(
        [
            sys.executable,
            str(project_copy / "tools" / "vendor"),
            "materialize",
            str(tree),
            "--sdist",
            str(upstream_sdist),
        ]
    )
    tests = tree / "tests" / "unit"
    assert tests.is_dir(), "the units carry no upstream-style unit tests"
    proc = run(
        [sys.executable, "-m", "pytest", "-q", str(tests)],
        cwd=tree,
        env={"PYTHONPATH": str(tree / "src")},
    )
    assert " passed" in proc.stdout


@pytest.mark.slow
def test_clean_clone_installs_into_a_fresh_venv(project_copy, tmp_path):
    """`pip install .` from a clean clone, the sdist downloaded from the index."""
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    py = str(venv / "bin" / "python")
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}  # forces the real download
    # The CPU build of torch first, so that the resolver keeps it.
    run([py, "-m", "pip", "install", "-q", "torch==2.13.0"], timeout=1200)
    proc = run([py, "-m", "pip", "install", str(project_copy)], env=env, timeout=1800)
    assert "Successfully installed" in proc.stdout
    assert (
        tmp_path / "cache/speculators-kimi/sdists/speculators-0.9.0.tar.gz"
    ).is_file()
    units = [u.name for u in load_series(project_copy)]
    check = run(
        [
            py,
            "-c",
            (
                "import importlib.metadata as md, speculators, speculators_kimi, "
                "speculators.version as v\n"
                "print(speculators.__file__)\n"
                "print(v.version, speculators_kimi.UPSTREAM_VERSION)\n"
                "print(','.join(speculators_kimi.PATCHES))\n"
                "files = md.distribution('speculators-kimi').files\n"
                "notice = [f for f in files if f.name == 'NOTICE'][0]\n"
                "print(notice.read_text())\n"
            ),
        ],
        cwd=tmp_path,
    )
    lines = check.stdout.splitlines()
    assert lines[0].startswith(str(venv)), "speculators must come from the new venv"
    assert lines[1] == "0.9.0 0.9.0"
    assert lines[2] == ",".join(units)
    assert "speculators 0.9.0" in check.stdout
    for name in units:
        assert f"  - {name}" in check.stdout
    version = run([str(venv / "bin" / "speculators-kimi"), "--version"]).stdout
    assert "upstream speculators 0.9.0" in version
    run([str(venv / "bin" / "speculators"), "--help"])
    # Python run from the repository root: speculators_kimi is the tree's (its build
    # info read from upstream_patches/), speculators still the installed one.
    here = run(
        [
            py,
            "-c",
            "import speculators, speculators_kimi as k\n"
            "print(speculators.__file__)\nprint(','.join(k.PATCHES))",
        ],
        cwd=project_copy,
    ).stdout.splitlines()
    assert here[0].startswith(str(venv)), here
    assert here[1] == ",".join(units)
    assert not list(project_copy.glob("*.egg-info")), "egg-info in the source tree"
    shutil.rmtree(venv)
