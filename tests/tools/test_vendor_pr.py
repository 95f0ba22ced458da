"""`tools/vendor pr` (upstream PR bundles) and `tools/vendor status`."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from helpers import extract_tar, run, vendor
from seriescheck.pytest_run import run_pytest, tree_env
from seriescheck.unit_files import own_test_files
from vendorlib.pin import Unit, load_series

IDENT = {
    "GIT_AUTHOR_NAME": "Pat Tester",
    "GIT_AUTHOR_EMAIL": "pat@example.com",
    "GIT_COMMITTER_NAME": "Pat Tester",
    "GIT_COMMITTER_EMAIL": "pat@example.com",
}
SIGNOFF = "Signed-off-by: Pat Tester <pat@example.com>"


@pytest.fixture(autouse=True)
def git_identity(monkeypatch):
    """Every `tools/vendor` run here signs off as Pat Tester."""
    for key, value in IDENT.items():
        monkeypatch.setenv(key, value)


def fresh_pin_repo(sdist: Path, dest: Path) -> Path:
    """A fresh extraction of the pinned release as a one-commit git repository."""
    with tarfile.open(sdist) as tf:
        extract_tar(tf, dest)
    (tree,) = dest.iterdir()
    git = ["git", "-c", "commit.gpgsign=false"]
    run([*git, "init", "-q", "-b", "main"], cwd=tree)
    run([*git, "add", "-A", "-f"], cwd=tree)
    run([*git, "commit", "-qm", "upstream"], cwd=tree, env=IDENT)
    return tree


def smallest_unit_with_tests(project: Path) -> Unit:
    """The smallest unit that ships tests: the bundle's mechanics, not a second
    run of the heaviest unit's tests (the series and the materialized tree run
    every unit's)."""
    return min(
        (u for u in load_series(project) if own_test_files(u)),
        key=lambda u: u.path.stat().st_size,
    )


def test_pr_bundle_applies_to_the_pin_signed_and_tested(
    project_copy, tmp_path, upstream_sdist
):
    unit = smallest_unit_with_tests(project_copy)
    out = tmp_path / "bundle"
    proc = vendor(
        project_copy,
        "pr",
        unit.name,
        "--out",
        str(out),
        "--sdist",
        str(upstream_sdist),
        "--no-mypy",
    )
    assert f"PR bundle for {unit.name}" in proc.stdout
    patches = sorted(out.glob("*.patch"))
    assert patches
    for name in ("LINT.txt", "COMMANDS.md", "PR_BODY.md"):
        assert (out / name).is_file()
    body = (out / "PR_BODY.md").read_text()
    assert "- [ ] A human has reviewed the code" in body
    assert "- [x] A human" not in body
    lint = (out / "LINT.txt").read_text()
    assert "== ruff check: " in lint and "== ruff format --check: " in lint
    assert "== mypy --check-untyped-defs: skipped" in lint
    commands = (out / "COMMANDS.md").read_text()
    assert "git am -3" in commands and "gh pr create" in commands
    assert "--body-file" in commands
    # The bundle applies to a fresh extraction of the pin with `git am`.
    tree = fresh_pin_repo(upstream_sdist, tmp_path / "fresh")
    run(["git", "am", "-q", *map(str, patches)], cwd=tree, env=IDENT)
    log = run(["git", "log", "--format=%H", "main"], cwd=tree).stdout.split()
    assert len(log) == 1 + len(patches)
    for sha in log[:-1]:
        msg = run(["git", "log", "-1", "--format=%B", sha], cwd=tree).stdout
        assert SIGNOFF in msg, msg
    # The unit's own test files are in the bundle; each is collected there and
    # its tests pass.
    tests = own_test_files(unit)
    assert tests, f"{unit.name} ships no tests"
    report = run_pytest(sys.executable, tree, tests, tree_env(tree / "src"))
    assert report.rc == 0 and not report.ids("failed"), report.tail
    ran = {o.file for o in report.outcomes if o.status == "passed"}
    assert ran == set(tests), (ran, tests)


def test_pr_includes_the_units_it_depends_on(project_copy, tmp_path, upstream_sdist):
    units = load_series(project_copy)
    base = next((u for u in reversed(units) if u.new_files()), None)
    if base is None:
        pytest.skip("no unit adds a file to build on")
    rel = base.new_files()[0]
    work = tmp_path / "work"
    vendor(
        project_copy, "materialize", "--git", str(work), "--sdist", str(upstream_sdist)
    )
    (work / rel).write_text((work / rel).read_text() + "# extended by 0999\n")
    pr_text = "# Extend the earlier change\n\n## Problem\n\nx\n\n## Change\n\ny"
    commit = ["git", "commit", "-qa", "-m", "0999-builds-on-earlier", "-m", pr_text]
    run(commit, cwd=work, env=IDENT)  # the work tree keeps `#` lines (cleanup)
    vendor(project_copy, "export", str(work))
    (unit,) = [u for u in load_series(project_copy) if u.name.startswith("0999")]
    assert unit.message() == pr_text + "\n"
    out = tmp_path / "bundle"
    proc = vendor(
        project_copy,
        "pr",
        "0999-builds-on-earlier",
        "--out",
        str(out),
        "--sdist",
        str(upstream_sdist),
        "--no-mypy",
    )
    assert "depends on earlier units (included first)" in proc.stdout
    assert base.name in proc.stdout
    patches = sorted(out.glob("*.patch"))
    assert len(patches) >= 2
    assert "Extend the earlier change" in patches[-1].read_text()
    assert base.name in (out / "PR_BODY.md").read_text()
    tree = fresh_pin_repo(upstream_sdist, tmp_path / "fresh")
    run(["git", "am", "-q", *map(str, patches)], cwd=tree, env=IDENT)
    assert "# extended by 0999" in (tree / rel).read_text()


def test_pr_without_git_identity_names_the_fix(project_copy, tmp_path, upstream_sdist):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        HOME=str(tmp_path),
        GIT_CONFIG_GLOBAL=str(tmp_path / "nogitconfig"),
        GIT_CONFIG_NOSYSTEM="1",
    )
    unit = load_series(project_copy)[-1]
    proc = subprocess.run(
        [sys.executable, str(project_copy / "tools/vendor"), "pr", unit.name],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "git config --global user.name" in proc.stderr
    assert "git config --global user.email" in proc.stderr
    assert not (project_copy / "build" / "pr").exists()


def test_pr_onto_an_upstream_clone_and_status(project_copy, tmp_path, upstream_sdist):
    upstream = fresh_pin_repo(upstream_sdist, tmp_path / "upstream")
    (upstream / "README.md").write_text(
        (upstream / "README.md").read_text() + "\nMore on main.\n"
    )
    run(["git", "commit", "-qam", "docs on main"], cwd=upstream, env=IDENT)
    unit = smallest_unit_with_tests(project_copy)
    out = tmp_path / "bundle"
    args = ["--sdist", str(upstream_sdist), "--no-mypy"]
    vendor(
        project_copy,
        "pr",
        unit.name,
        "--out",
        str(out),
        "--upstream-git",
        str(upstream),
        *args,
    )
    tip = run(["git", "rev-parse", "HEAD"], cwd=upstream).stdout.strip()
    assert tip in (out / "COMMANDS.md").read_text()
    status = vendor(
        project_copy,
        "status",
        "--upstream-git",
        str(upstream),
        "--sdist",
        str(upstream_sdist),
    ).stdout
    assert f"upstream tip {tip[:12]}" in status
    for u in load_series(project_copy):
        row = next(ln for ln in status.splitlines() if ln.startswith(u.name + " "))
        assert row.split()[-2:] == ["yes", "yes"] or "needs earlier" in row, row
    patches = sorted(out.glob("*.patch"))
    run(["git", "am", "-q", *map(str, patches)], cwd=upstream, env=IDENT)
    assert "More on main." in (upstream / "README.md").read_text()


@pytest.mark.slow
def test_pr_lint_runs_mypy(project_copy, tmp_path, upstream_sdist):
    """mypy on a cold cache analyses torch (about 90 s); warm, a few seconds."""
    unit = smallest_unit_with_tests(project_copy)
    out = tmp_path / "bundle"
    vendor(
        project_copy, "pr", unit.name, "--out", str(out), "--sdist", str(upstream_sdist)
    )
    lint = (out / "LINT.txt").read_text()
    assert "== mypy --check-untyped-defs: " in lint
    assert "== mypy --check-untyped-defs: skipped" not in lint
