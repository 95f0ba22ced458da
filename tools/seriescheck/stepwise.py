"""`tools/vendor test-series`: every unit, applied with the ones before it, tested.

For unit i of the series, the pristine pin plus units 1..i is copied into a scratch
tree outside any git repository (upstream's provenance code looks for an enclosing
`.git` and writes a `speculators.patch` sidecar where it finds one). On that tree,
imported from its `src/` (``PYTHONPATH``), one pytest process runs upstream's own
unit tests (the `upstream-suite` folder's `snapshot/`) with the tree's `tests/` (the
tests of units 1..i) laid over them; from that one JUnit report come the baseline
tests that regressed (`baseline.txt`) and the units' tests that failed. So a later
unit that breaks an earlier unit's tests is caught too.

The last tree is what `pip install` builds. With ``--skip-installed`` (CI), when
the interpreter's installed `speculators` holds exactly its files it is not tested
again here: CI runs upstream's suite on the install, and the project's own tests
(`tests/tools/test_vendor_build.py`) run every unit's tests on the materialized tree.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from vendorlib.errors import VendorError
from vendorlib.gitwork import am, materialize_git
from vendorlib.pin import Unit, load_pin, load_series, pinned_tree

from .dropin.compare import Comparison
from .impact import EVERYTHING, affected_since
from .installed import imported_from, installed_package, same_package
from .pytest_run import PytestReport, PytestServer, TreeRun, tree_env
from .series_report import OwnResult, SuiteResult, UnitReport, line, summarize
from .unit_files import (
    is_test_file,
    own_test_files,
    relevant_test_files,
    touched_files,
    tree_test_dir_files,
)

TIMEOUT_S = 1800


def enclosing_git(path: Path) -> Path | None:
    """The nearest folder at or above ``path`` holding `.git` (upstream's test)."""
    d = path.resolve()
    while True:
        if (d / ".git").exists():
            return d
        if d == d.parent:
            return None
        d = d.parent


def select_units(units: list[Unit], wanted: str | None) -> set[str]:
    """Names of the units ``--units`` picks (full names or their number prefixes)."""
    if not wanted:
        return {u.name for u in units}
    picked: set[str] = set()
    for item in filter(None, (w.strip() for w in wanted.split(","))):
        match = [
            u.name for u in units if u.name == item or u.name.split("-")[0] == item
        ]
        if not match:
            raise VendorError(
                f"--units: {item!r} is no unit of the series "
                f"({', '.join(u.name for u in units)})"
            )
        picked.update(match)
    return picked


def suite_workdir(suite: Path, tree: Path, dest: Path) -> Path:
    """Upstream's snapshot with the tree's `tests/` laid over it (no file clashes)."""
    shutil.copytree(suite / "snapshot", dest, symlinks=True)
    for rel in tree_test_dir_files(tree):
        target = dest / rel
        if target.exists():
            raise VendorError(
                f"{tree.name}: {rel} would replace upstream's snapshot file of the "
                "same name; give the unit's file another name"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(tree / rel, target)
    return dest


def read_baseline(suite: Path) -> set[str]:
    return set((suite / "baseline.txt").read_text().splitlines()) - {""}


def upstream_files(suite: Path) -> list[str]:
    """Upstream's test files (`snapshot/tests/unit`), relative to the snapshot."""
    top = suite / "snapshot"
    return sorted(
        rel
        for p in (top / "tests" / "unit").rglob("*.py")
        if is_test_file(rel := p.relative_to(top).as_posix())
    )


def test_file(test: str, files: Iterable[str]) -> str | None:
    """The file of ``files`` that holds a JUnit-named test (``a.b.test_x.C::t``)."""
    parts = test.split("::")[0].split(".")
    known = set(files)
    for i in range(len(parts), 0, -1):
        if (f := "/".join(parts[:i]) + ".py") in known:
            return f
    return None


@dataclass(frozen=True)
class TreePlan:
    """What one tree's pytest runs are: the unit, its tree, the units' test files
    beside upstream's, the runs (none: nothing to run) and the baseline tests
    they hold (None: no suite)."""

    unit: Unit
    tree: Path
    where: str
    files: list[str]
    runs: list[TreeRun]
    baseline: set[str] | None


def plan_tree(
    suite: Path | None,
    unit: Unit,
    tree: Path,
    where: str,
    files: list[str],
    upstream: list[str],
    shards: int,
    record: bool,
    seconds: dict[str, float] | None = None,
) -> TreePlan:
    """pytest on the tree: upstream's test files ``upstream`` and the units' tests
    ``files``, in at most ``shards`` runs of about equal time, each in its own
    folder; ``record``: each records its test files' imports (`impact`).
    ``seconds``: each file's time on an earlier tree (a file not timed yet is
    costed by its size, at the timed files' seconds per byte)."""
    if suite is None:
        runs = [TreeRun(unit.name, tree, tree / "src", files)] if files else []
        return TreePlan(unit, tree, where, files, runs, None)
    every = upstream_files(suite)
    held = {t for t in read_baseline(suite) if test_file(t, every) in {*upstream}}
    targets = [*upstream, *files]

    def size(t: str) -> int:
        path = suite / "snapshot" / t
        return (path if path.is_file() else tree / t).stat().st_size

    timed = {t: s for t, s in (seconds or {}).items() if t in targets}
    rate = sum(timed.values()) / max(1, sum(map(size, timed))) if timed else 1.0

    def cost(t: str) -> float:
        return timed[t] if t in timed else size(t) * rate

    groups: list[list[str]] = [[] for _ in range(min(shards, len(targets)))]
    load = [0.0] * len(groups)
    for t in sorted(targets, key=cost, reverse=True):
        i = load.index(min(load))
        groups[i].append(t)
        load[i] += cost(t)
    runs = []
    for i, group in enumerate(groups):
        cwd = suite_workdir(suite, tree, tree.parent / f"{tree.name}.run{i}")
        rec = cwd.parent / f"{cwd.name}.imports.json" if record else None
        runs.append(TreeRun(f"{unit.name}/{i}", cwd, tree / "src", sorted(group), rec))
    return TreePlan(unit, tree, where, files, runs, held)


def judge_tree(plan: TreePlan, report: PytestReport | None) -> UnitReport:
    """The unit's verdict from its tree's pytest report (None: nothing ran)."""
    own = OwnResult(plan.files, own=own_test_files(plan.unit))
    if plan.baseline is not None and report is None:
        report = PytestReport(0)
    if report is None:
        return UnitReport(plan.unit.name, plan.where, None, own, 0.0)
    own.rc, own.tail = report.rc, report.tail
    mine = report.in_files(set(plan.files))
    own.passed = sum(o.status == "passed" for o in mine)
    own.failed = [o.id for o in mine if o.status == "failed"]
    ran = {o.file for o in mine}
    own.failed += [
        f"{f} (no test ran: see pytest's output)" for f in plan.files if f not in ran
    ]
    suite_result = None
    if plan.baseline is not None:
        lost = sorted(plan.baseline - set(report.ids("passed")))
        suite_result = SuiteResult(
            0 if report.reported else report.rc,
            len(plan.baseline) - len(lost),
            len(plan.baseline),
            lost,
            report.tail,
        )
        if not report.reported:
            own.failed.append(f"(pytest wrote no report, rc={report.rc})")
    return UnitReport(plan.unit.name, plan.where, suite_result, own, report.seconds)


def merged(reports: list[PytestReport]) -> PytestReport:
    """One tree's shards' reports as one."""
    bad = [r.rc for r in reports if r.rc not in (0, 5)]
    return PytestReport(
        bad[0] if bad else min(r.rc for r in reports),
        [o for r in reports for o in r.outcomes],
        "\n".join(r.tail for r in reports if r.rc not in (0, 5)) or reports[0].tail,
        max(r.seconds for r in reports),
    )


def prepare_trees(
    units: list[Unit], wanted: set[str], stage: Path, scratch: Path, python: str
) -> tuple[list[tuple[Unit, Path, str]], tuple[str, str] | None]:
    """`git am` the units one by one onto ``stage`` (a history of the release);
    copy its files out after each wanted one.

    Returns (unit, its tree, where `speculators` is imported from) per wanted unit
    that applies, and (name, why) of the first unit that does not apply (or None).
    """
    trees: list[tuple[Unit, Path, str]] = []
    for i, unit in enumerate(units):
        try:
            am(stage, unit)
        except VendorError as err:
            return trees, (unit.name, str(err))
        if unit.name in wanted:
            tree = scratch / f"{i + 1:02d}-{unit.name}"
            shutil.copytree(
                stage, tree, symlinks=True, ignore=shutil.ignore_patterns(".git")
            )
            trees.append((unit, tree, imported_from(python, tree, scratch)))
    return trees, None


def _scratch_outside_git() -> Path:
    """A scratch folder for the trees, refused inside a git repository."""
    scratch = Path(tempfile.mkdtemp(prefix="vendor-test-series-"))
    repo = enclosing_git(scratch)
    if repo is not None:
        shutil.rmtree(scratch)
        raise VendorError(
            f"{scratch} lies inside the git repository {repo}; upstream's provenance "
            "code would write sidecars there. Set TMPDIR to a folder outside any "
            "git repository."
        )
    return scratch


def _same_as_installed(
    python: str, scratch: Path, last: tuple[Unit, Path, str]
) -> UnitReport | None:
    """The last tree's report when the installed package is that tree (it is
    tested by the suite and the test command already); else None."""
    installed = installed_package(python, scratch)
    if installed is None or not same_package(installed, last[1]):
        return None
    return UnitReport(
        last[0].name,
        str(installed / "__init__.py"),
        None,
        OwnResult([]),
        0.0,
        skipped=f"= the installed package {installed}: not tested twice",
    )


def _check_suite(suite: Path | None) -> None:
    """``--upstream-suite`` holds upstream's unit tests and their baseline."""
    if suite is not None and not (
        (suite / "snapshot" / "tests" / "unit").is_dir()
        and (suite / "baseline.txt").is_file()
    ):
        raise VendorError(
            f"--upstream-suite {suite}: no snapshot/tests/unit and baseline.txt there"
        )


def _dropin_checks(
    root: Path,
    python: str,
    trees: list[tuple[Unit, Path, str]],
    pristine: Path,
    jobs: int,
) -> dict[str, Comparison]:
    """The drop-in check of every tree against the pristine pin, timed."""
    from .dropin.check import run_series_dropin

    t0 = time.monotonic()
    checked = run_series_dropin(
        root,
        python,
        [(unit.name, tree) for unit, tree, _ in trees],
        pristine,
        jobs=max(1, jobs),
    )
    print(
        f"drop-in check of {len(checked)} trees against the pin: "
        f"{time.monotonic() - t0:.0f} s",
        flush=True,
    )
    return checked


def _take_records(
    recorded: dict[str, tuple[int, list[str]]], runs: list[TreeRun], tree: int
) -> None:
    """Each test file's imports as ``runs`` (of tree ``tree``) recorded them,
    unless a later tree's record is there already (trees end out of order)."""
    for run in runs:
        assert run.record is not None
        seen = json.loads(run.record.read_text()) if run.record.is_file() else {}
        for f in run.targets:
            if recorded.get(f, (-1, []))[0] < tree:
                recorded[f] = (tree, seen.get(f, [EVERYTHING]))


def _run_trees(
    suite: Path | None,
    units: list[Unit],
    trees: list[tuple[Unit, Path, str]],
    server: PytestServer,
    jobs: int,
    judged: Callable[[TreePlan, PytestReport | None], None],
    all_tests: bool,
) -> None:
    """The trees in series order, each in one run, started as soon as a run ends
    (``jobs`` at a time: a long tree holds only its own core); the last tree is
    split into ``jobs`` runs by time. Of upstream's test files a tree runs those
    whose imports, recorded on the last ended tree that ran them, meet a file the
    units after that tree, up to its own, touch (a file no ended tree ran: all;
    all with ``all_tests``): a file's imports change only where a unit touches one
    of them, so a later record can only add what those units meet already."""
    every = upstream_files(suite) if suite is not None else []
    total = len(read_baseline(suite)) if suite is not None else 0
    index = {u.name: i for i, u in enumerate(units)}
    record = suite is not None and not all_tests
    recorded: dict[str, tuple[int, list[str]]] = {}  # test file: (tree, imports)
    seconds: dict[str, float] = {}  # per test file, on the last tree it ran
    waiting = list(trees)
    running: dict[str, tuple[TreePlan, list[PytestReport]]] = {}

    def touched_after(tree: int, last: int) -> set[str]:
        """What units ``tree+1 .. last`` touch (tree: where a record was taken)."""
        return set().union(*(touched_files(u) for u in units[tree + 1 : last + 1]))

    while waiting or running:
        while waiting and len(server.queued) < jobs:
            unit, tree, where = waiting.pop(0)
            i = index[unit.name]
            picked, why = every, "--all-tests"
            if not all_tests:
                picked, why = affected_since(
                    recorded, every, partial(touched_after, last=i)
                )
            files = relevant_test_files(units, i, tree)
            shards = 1 if waiting else jobs
            plan = plan_tree(
                suite, unit, tree, where, files, picked, shards, record, seconds
            )
            if suite is not None:
                held = len(plan.baseline or ())
                number = unit.name.split("-")[0]
                print(f"{number}: {held}/{total} upstream tests ({why})")
            if not plan.runs:
                judged(plan, None)
                continue
            server.submit(plan.runs)
            running[unit.name] = (plan, [])
        if not running:
            continue
        run, report = server.next_report()
        plan, reports = running[run.key.rsplit("/", 1)[0]]
        reports.append(report)
        if len(reports) < len(plan.runs):
            continue
        del running[plan.unit.name]
        judged(plan, merged(reports))
        i = index[plan.unit.name]
        ran: dict[str, float] = {}
        for o in (o for report in reports for o in report.outcomes):
            ran[o.file] = ran.get(o.file, 0.0) + o.seconds
        seconds.update(ran)
        if record:
            _take_records(recorded, plan.runs, i)


def run_series(
    root: Path,
    python: str,
    suite: Path | None,
    units_arg: str | None = None,
    json_out: Path | None = None,
    sdist: Path | None = None,
    keep: bool = False,
    jobs: int = 1,
    skip_installed: bool = False,
    dropin: bool = False,
    all_tests: bool = False,
) -> int:
    """Test each (selected) unit on pin + units up to it; print a line per unit.

    ``dropin``: also run the drop-in check (`dropin.check`) on each tree against
    the pin, held to the differences the tree's units state. ``all_tests``: each
    tree runs upstream's whole suite, not the tests its units can reach.
    """
    _check_suite(suite)
    pin = load_pin(root)
    units = load_series(root)
    wanted = select_units(units, units_arg)
    scratch = _scratch_outside_git()
    reports: list[UnitReport] = []
    start = time.monotonic()
    try:
        stage = pinned_tree(root, scratch / "stage", sdist)
        materialize_git(root, stage, [])
        trees, broken = prepare_trees(units, wanted, stage, scratch, python)
        print(
            f"{pin.name} {pin.version} + each unit with the ones before it: "
            f"{len(trees)} of {len(units)} units, {jobs} at a time; "
            f"scratch {scratch}; python {python}",
            flush=True,
        )
        if skip_installed and trees and trees[-1][0] is units[-1] and not broken:
            skipped = _same_as_installed(python, scratch, trees[-1])
            if skipped is not None:
                trees.pop()
                reports.append(skipped)
                print(line(skipped), flush=True)
        checked = (
            _dropin_checks(
                root,
                python,
                trees,
                pinned_tree(root, scratch / "pristine", sdist),
                jobs,
            )
            if dropin and trees
            else {}
        )

        def judged(plan: TreePlan, report: PytestReport | None) -> None:
            result = judge_tree(plan, report)
            result.dropin = checked.get(plan.unit.name)
            reports.append(result)
            print(line(result), flush=True)

        env = tree_env(None, one_thread=jobs > 1)
        with PytestServer(python, env, max(1, jobs), TIMEOUT_S) as server:
            _run_trees(suite, units, trees, server, max(1, jobs), judged, all_tests)
    finally:
        if keep:
            print(f"trees kept under {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    return summarize(
        reports, units, wanted, broken, time.monotonic() - start, pin, json_out
    )
