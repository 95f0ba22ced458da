"""`tools/vendor test-series` on a tiny made-up pin and series (real git, no torch).

The upstream suite is a made-up snapshot in the real suite's layout (`snapshot/`
with `tests/unit`, `baseline.txt`) whose one baseline test fails when the tree's
`speculators` says so; the real suite (../shared/upstream-suite) runs in .ci/run.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tarfile
from pathlib import Path

import pytest
from helpers import ROOT, run
from seriescheck.unit_files import own_test_files
from vendorlib.pin import load_series

IDENT = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
}

#: Upstream's made-up suite: one baseline test, lost when speculators.BROKEN.
SUITE_TEST = """import speculators


def test_still_works():
    assert not getattr(speculators, "BROKEN", 0)


def test_not_in_baseline():
    assert False, "fails on pristine upstream too: not a regression"
"""


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def mail(name: str, diff: str) -> str:
    """``diff`` as a unit file: a mail `git am` takes, its subject the unit's name."""
    return f"From: t <t@example.invalid>\nSubject: {name}\n\n# {name}\n---\n{diff}"


def git(cwd: Path, *args: str) -> str:
    return run(["git", "-c", "commit.gpgsign=false", *args], cwd=cwd, env=IDENT).stdout


@pytest.fixture
def fake_project(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(project root, its sdist, a stand-in upstream suite): two units, one bad."""
    top = tmp_path / "release" / "speculators-0.0.1"
    write(top / "src/speculators/__init__.py", '"""Fake upstream."""\nVALUE = 1\n')
    write(top / "PKG-INFO", "Metadata-Version: 2.1\nName: speculators\n")
    sdist = tmp_path / "speculators-0.0.1.tar.gz"
    with tarfile.open(sdist, "w:gz") as tf:
        tf.add(top, arcname=top.name)
    sha = hashlib.sha256(sdist.read_bytes()).hexdigest()

    root = tmp_path / "project"
    patches = root / "upstream_patches"
    write(
        patches / "UPSTREAM.toml",
        f'[upstream]\nname = "speculators"\nversion = "0.0.1"\n'
        f'sdist = "{sdist.name}"\nsha256 = "{sha}"\n',
    )
    write(patches / "series", "0001-good\n0002-bad\n")
    # Each unit as the git diff of its change: 0001 adds files, 0002 changes an
    # upstream file and 0001's test, deletes 0001's other test, adds a failing one.
    work = tmp_path / "work"
    shutil.copytree(top, work)
    git(work, "init", "-q")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "base")
    write(work / "src/speculators/extra.py", "TWICE = 2\n")
    write(work / "tests/unit/mock/helpers.py", "def two():\n    return 2\n")
    write(
        work / "tests/unit/test_extra.py",
        "from speculators.extra import TWICE\nfrom tests.unit.mock import helpers\n\n\n"
        "def test_twice():\n    assert helpers.two() == TWICE\n",
    )
    write(work / "tests/unit/test_old.py", "def test_old():\n    assert True\n")
    git(work, "add", "-A")
    diff = git(work, "diff", "--cached", "--full-index")
    write(patches / "0001-good.patch", mail("0001-good", diff))
    git(work, "commit", "-qm", "0001-good")
    init = work / "src/speculators/__init__.py"
    init.write_text(init.read_text() + "BROKEN = 1\n")
    test = work / "tests/unit/test_extra.py"
    test.write_text(test.read_text() + "\n\ndef test_value():\n    assert True\n")
    (work / "tests/unit/test_old.py").unlink()
    write(
        work / "tests/unit/test_new.py",
        "def test_fails():\n    assert False, 'unit 0002 is broken'\n",
    )
    git(work, "add", "-A")
    diff = git(work, "diff", "--cached", "--full-index")
    write(patches / "0002-bad.patch", mail("0002-bad", diff))

    suite = tmp_path / "suite"
    for package in ("tests/__init__.py", "tests/unit/__init__.py"):
        write(suite / "snapshot" / package, "")
    write(suite / "snapshot/tests/unit/test_core.py", SUITE_TEST)
    write(suite / "baseline.txt", "tests.unit.test_core::test_still_works\n")
    return root, sdist, suite


def vendor(root: Path, sdist: Path, *args: str, env: dict[str, str] | None = None):
    return run(
        [
            sys.executable,
            str(ROOT / "tools" / "vendor"),
            "--root",
            str(root),
            "test-series",
            "--sdist",
            str(sdist),
            "--python",
            sys.executable,
            *args,
        ],
        env=env,
        check=False,
        timeout=300,
    )


def test_own_tests_are_the_test_files_a_unit_adds_or_changes(fake_project):
    root, _, _ = fake_project
    good, bad = load_series(root)
    assert own_test_files(good) == [
        "tests/unit/test_extra.py",
        "tests/unit/test_old.py",
    ]  # the helper under tests/unit/mock is no test
    assert bad.files() == {
        "src/speculators/__init__.py": "M",
        "tests/unit/test_extra.py": "M",
        "tests/unit/test_new.py": "A",
        "tests/unit/test_old.py": "D",
    }
    assert own_test_files(bad) == ["tests/unit/test_extra.py", "tests/unit/test_new.py"]


def test_each_unit_is_tested_and_a_failing_one_is_named(fake_project, tmp_path):
    root, sdist, suite = fake_project
    out = tmp_path / "series.json"
    proc = vendor(root, sdist, "--upstream-suite", str(suite), "--json", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    row = {ln.split()[0]: ln for ln in lines if ln.startswith("  000")}
    assert "suite 1/1 (0 regressed)" in row["0001-good"]
    assert "units' 2 passed, 0 failed (2 files, 2 its own)" in row["0001-good"]
    assert row["0001-good"].endswith("ok")
    assert "suite 0/1 (1 regressed)" in row["0002-bad"]
    # 0001's test_old.py is gone (0002 deletes it); 0002's two files remain.
    assert "units' 2 passed, 1 failed (2 files, 2 its own)" in row["0002-bad"]
    assert row["0002-bad"].endswith("FAIL")
    assert (
        "problem: 0002-bad: upstream test regressed: "
        "tests.unit.test_core::test_still_works" in lines
    )
    assert "problem: 0002-bad: unit test failed: tests.unit.test_new::test_fails" in (
        lines
    )
    assert not [ln for ln in lines if "problem:" in ln and "not_in_baseline" in ln]
    assert lines[-1].startswith("test-series: 1/2 units pass; failing: 0002-bad")
    data = json.loads(out.read_text())
    units = {u["unit"]: u for u in data["units"]}
    assert units["0001-good"]["ok"] and not units["0002-bad"]["ok"]
    for u in units.values():  # imported from the scratch tree's src, not the venv
        assert Path(u["imported_from"]).parent.parent.name == "src"
        assert u["imported_from"].endswith(f"{u['unit']}/src/speculators/__init__.py")


def test_units_selects_and_earlier_units_are_still_applied(fake_project):
    root, sdist, suite = fake_project
    proc = vendor(root, sdist, "--upstream-suite", str(suite), "--units", "0001")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0002-bad" not in proc.stdout
    # 0002 alone still has 0001 under it: its changed test_extra.py imports 0001's.
    proc = vendor(root, sdist, "--no-suite", "--units", "0002-bad")
    assert proc.returncode == 1
    assert "units' 2 passed, 1 failed (2 files, 2 its own)" in proc.stdout
    proc = vendor(root, sdist, "--no-suite", "--units", "0003")
    assert proc.returncode == 2 and "'0003' is no unit of the series" in proc.stderr


def test_a_scratch_folder_inside_a_git_repository_is_refused(fake_project, tmp_path):
    root, sdist, suite = fake_project
    repo = tmp_path / "repo"
    (repo / "tmp").mkdir(parents=True)
    git(repo, "init", "-q")
    proc = vendor(
        root,
        sdist,
        "--upstream-suite",
        str(suite),
        env={"TMPDIR": str(repo / "tmp")},
    )
    assert proc.returncode == 2
    assert f"inside the git repository {repo}" in proc.stderr
    assert not any((repo / "tmp").iterdir())


def test_a_unit_that_does_not_apply_is_named(fake_project):
    root, sdist, _ = fake_project
    patches = root / "upstream_patches"
    # 0002's diff a second time: its deleted file is gone, its hunks are in place.
    shutil.copy(patches / "0002-bad.patch", patches / "0003-again.patch")
    shutil.copy(patches / "0001-good.patch", patches / "0004-later.patch")
    (patches / "series").write_text("0001-good\n0002-bad\n0003-again\n0004-later\n")
    proc = vendor(root, sdist, "--no-suite")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert "problem: 0003-again: does not apply after the units before it:" in out
    assert "unit 0003-again: " in out  # `git am`'s explanation follows
    assert "not tested (an earlier unit does not apply): ['0004-later']" in out
    assert out.splitlines()[-1].startswith(
        "test-series: 1/3 units pass; failing: 0002-bad, 0003-again"
    )


def test_a_later_unit_breaking_an_earlier_units_test_is_caught(fake_project):
    root, sdist, suite = fake_project
    patches = root / "upstream_patches"
    write(
        patches / "0003-later.patch",
        mail(
            "0003-later",
            "diff --git a/src/speculators/extra.py b/src/speculators/extra.py\n"
            "--- a/src/speculators/extra.py\n+++ b/src/speculators/extra.py\n"
            "@@ -1 +1 @@\n-TWICE = 2\n+TWICE = 3\n",
        ),
    )
    (patches / "series").write_text("0001-good\n0003-later\n")
    proc = vendor(root, sdist, "--upstream-suite", str(suite))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    row = next(ln for ln in proc.stdout.splitlines() if ln.startswith("  0003"))
    # 0003 has no tests of its own; 0001's, run on 0003's tree, fail.
    assert "units' 1 passed, 1 failed (2 files, 0 its own)" in row, row
    assert (
        "problem: 0003-later: unit test failed: tests.unit.test_extra::test_twice"
        in proc.stdout
    )


def test_the_installed_package_is_recognised_file_by_file(tmp_path):
    from seriescheck.installed import same_package

    tree = tmp_path / "tree"
    write(tree / "src/speculators/__init__.py", "VALUE = 1\n")
    write(tree / "src/speculators/sub/mod.py", "X = 1\n")
    installed = tmp_path / "site/speculators"
    shutil.copytree(tree / "src/speculators", installed)
    write(installed / "__pycache__/mod.cpython-312.pyc", "bytecode")
    assert same_package(installed, tree)
    write(installed / "sub/mod.py", "X = 2\n")
    assert not same_package(installed, tree)
    (installed / "sub/mod.py").unlink()
    assert not same_package(installed, tree)


def test_a_tree_runs_the_upstream_files_its_unit_reaches(fake_project):
    root, sdist, suite = fake_project
    write(suite / "snapshot/tests/unit/test_side.py", "def test_side():\n    pass\n")
    with (suite / "baseline.txt").open("a") as f:
        f.write("tests.unit.test_side::test_side\n")
    proc = vendor(root, sdist, "--upstream-suite", str(suite))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "0001: 2/2 upstream tests (no imports recorded yet)" in (lines)
    # 0002 changes speculators/__init__.py: test_core imports it, test_side not.
    assert "0002: 1/2 upstream tests (touches src/speculators/__init__.py)" in lines
    row = next(ln for ln in lines if ln.startswith("  0002-bad"))
    assert "suite 0/1 (1 regressed)" in row
    # Two trees side by side (--jobs 2): each its own verdict.
    proc = vendor(
        root, sdist, "--upstream-suite", str(suite), "--all-tests", "--jobs", "2"
    )
    row = next(ln for ln in proc.stdout.splitlines() if ln.startswith("  0002-bad"))
    assert "suite 1/2 (1 regressed)" in row, proc.stdout
    assert "0002: 2/2 upstream tests (--all-tests)" in proc.stdout


def test_a_trees_shards_are_balanced_by_the_time_its_files_took(tmp_path):
    """Shards split by the seconds each file took on an earlier tree, so a short
    file of slow tests is not paired with a long file of fast ones."""
    from seriescheck.stepwise import plan_tree
    from vendorlib.pin import Unit

    suite = tmp_path / "suite"
    for name, size in {"slow": 10, "long": 4000, "mid": 3000, "new": 2000}.items():
        write(suite / f"snapshot/tests/unit/test_{name}.py", "#" * size)
    write(suite / "baseline.txt", "")
    unit = Unit("0001-x", tmp_path / "unit")
    files = [f"tests/unit/test_{n}.py" for n in ("slow", "long", "mid", "new")]

    def shards(seconds: dict[str, float] | None) -> list[list[str]]:
        tree = tmp_path / f"tree{len(seconds or ())}"  # its runs' folders beside it
        (tree / "src").mkdir(parents=True)
        plan = plan_tree(suite, unit, tree, "", [], files, 2, False, seconds)
        return sorted(run.targets for run in plan.runs)

    # By size alone the 10-byte file joins the long one's shard ...
    assert ["tests/unit/test_long.py", "tests/unit/test_slow.py"] in shards(None)
    # ... by time it takes a shard of its own; an untimed file is costed by size.
    timed = {files[0]: 60.0, files[1]: 8.0, files[2]: 6.0}
    assert shards(timed) == [
        ["tests/unit/test_long.py", "tests/unit/test_mid.py", "tests/unit/test_new.py"],
        ["tests/unit/test_slow.py"],
    ]


def test_a_fed_run_starts_as_soon_as_a_run_ends():
    """The series' pool (`forkpool.run_all` with ``feed``): a tree submitted when
    a short run ends starts then, beside a long run, and ends before it; in
    batches it would wait for the long one."""
    import time

    from seriescheck.forkpool import Job, run_all

    heard: list[str] = []
    # What the feed gives once this many results are heard (None: no more).
    after: dict[int, list[Job] | None] = {
        0: [Job("short", lambda: "short")],
        1: [Job("fed", lambda: "fed")],
        2: None,
    }

    def feed(idle: bool) -> list[Job] | None:
        return after.pop(len(heard)) if len(heard) in after else []

    def long() -> str:
        time.sleep(3)
        return "long"

    results = run_all(
        [Job("long", long)],
        2,
        60,
        on_result=lambda key, _: heard.append(key),
        feed=feed,
    )
    assert heard == ["short", "fed", "long"]
    assert {k: v["ok"] for k, v in results.items()} == {
        "long": "long",
        "short": "short",
        "fed": "fed",
    }


def test_the_server_reads_whole_lines_as_they_come():
    """Two submissions in one write are two lines now, a partial one waits for
    its end, and the end of input is None (the server then stops its runs)."""
    import os

    from seriescheck.pytest_server import Lines

    read, write = os.pipe()
    lines = Lines(read)
    assert lines.take(wait=False) == []  # nothing yet: no blocking
    os.write(write, b'[{"a": 1}]\n[{"b": 2}]\n[{"c"')
    assert lines.take(wait=False) == ['[{"a": 1}]', '[{"b": 2}]']
    os.write(write, b": 3}]\n")
    assert lines.take(wait=True) == ['[{"c": 3}]']
    os.close(write)
    assert lines.take(wait=True) is None
    os.close(read)
