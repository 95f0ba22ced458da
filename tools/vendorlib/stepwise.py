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

import filecmp
import json
import re
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .dropin.compare import Comparison
from .dropin.compare import report as dropin_report
from .errors import VendorError
from .pin import Pin, Unit, load_pin, load_series
from .proc import captured
from .pytest_run import PytestReport, TreeRun, run_pytest_forked, tree_env
from .sdist import extract, obtain
from .units import apply_unit

_DIFF = re.compile(r"^diff --git a/(?P<a>\S+) b/(?P<b>\S+)$")
TIMEOUT_S = 1800
# Where `import speculators` would load it from, without running it (torch is slow).
_WHERE = "import importlib.util as u; print(u.find_spec('speculators').origin)"


def is_test_file(rel: str) -> bool:
    """A pytest test module under `tests/` (pytest's default file patterns)."""
    path = Path(rel)
    return (
        path.parts[:1] == ("tests",)
        and path.suffix == ".py"
        and (path.name.startswith("test_") or path.stem.endswith("_test"))
    )


def patched_files(patch_text: str) -> dict[str, bool]:
    """Each file a git diff names (its new path) -> whether the diff deletes it."""
    out: dict[str, bool] = {}
    current: str | None = None
    for line in patch_text.splitlines():
        if m := _DIFF.match(line):
            current = m["b"]
            out[current] = False
        elif current is not None and line.startswith("deleted file mode"):
            out[current] = True
    return out


def own_test_files(unit: Unit) -> list[str]:
    """The unit's own tests: test files it adds under `tests/` or changes."""
    found = {rel.as_posix() for rel in unit.new_files()}
    if unit.patch.is_file():
        for rel, deleted in patched_files(unit.patch.read_text()).items():
            if not deleted:
                found.add(rel)
    return sorted(rel for rel in found if is_test_file(rel))


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


@dataclass
class SuiteResult:
    rc: int
    passed: int | None = None
    total: int | None = None
    regressed: list[str] = field(default_factory=list)
    tail: str = ""


@dataclass
class OwnResult:
    """The tests of every unit so far (the tree's `tests/`), this unit's named."""

    files: list[str]
    rc: int | None = None
    passed: int = 0
    failed: list[str] = field(default_factory=list)
    tail: str = ""
    own: list[str] = field(default_factory=list)


@dataclass
class UnitReport:
    unit: str
    imported_from: str
    suite: SuiteResult | None
    own: OwnResult
    seconds: float
    skipped: str = ""
    dropin: Comparison | None = None

    @property
    def ok(self) -> bool:
        suite_ok = self.suite is None or (
            self.suite.rc == 0 and not self.suite.regressed
        )
        dropin_ok = self.dropin is None or self.dropin.ok
        return suite_ok and dropin_ok and not self.own.failed


def imported_from(python: str, tree: Path, cwd: Path) -> str:
    """Where ``python`` imports `speculators` from with :func:`tree_env`; checked."""
    proc = captured([python, "-c", _WHERE], cwd=cwd, env=tree_env(tree / "src"))
    where = proc.stdout.strip()
    src = (tree / "src").resolve()
    if proc.returncode != 0 or not Path(where).resolve().is_relative_to(src):
        raise VendorError(
            f"{python} imports speculators from {where or '(nothing)'}, not from "
            f"{src}: {proc.stderr.strip()[-500:]}"
        )
    return where


def installed_package(python: str, cwd: Path) -> Path | None:
    """The `speculators` package folder ``python`` imports without PYTHONPATH."""
    proc = captured([python, "-c", _WHERE], cwd=cwd, env=tree_env(None))
    where = proc.stdout.strip()
    return Path(where).parent if proc.returncode == 0 and where else None


def same_package(installed: Path, tree: Path) -> bool:
    """Whether the installed package holds exactly the tree's `src/speculators`."""

    def files(top: Path) -> dict[str, Path]:
        return {
            p.relative_to(top).as_posix(): p
            for p in top.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        }

    want, have = files(tree / "src" / "speculators"), files(installed)
    return want.keys() == have.keys() and all(
        filecmp.cmp(want[k], have[k], shallow=False) for k in want
    )


def tree_test_files(tree: Path) -> list[str]:
    """The test files under the tree's `tests/`: those of every unit so far."""
    return [rel for rel in tree_test_dir_files(tree) if is_test_file(rel)]


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


def tree_test_dir_files(tree: Path) -> list[str]:
    """Every file under the tree's `tests/` (helpers and conftests included)."""
    top = tree / "tests"
    if not top.is_dir():
        return []
    return sorted(
        p.relative_to(tree).as_posix()
        for p in top.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )


def read_baseline(suite: Path) -> set[str]:
    return set((suite / "baseline.txt").read_text().splitlines()) - {""}


def source_files(unit: Unit) -> set[str]:
    """The upstream source files (``src/``) a unit adds or its diff changes."""
    found = {rel.as_posix() for rel in unit.new_files()}
    if unit.patch.is_file():
        found |= set(patched_files(unit.patch.read_text()))
    return {rel for rel in found if rel.startswith("src/")}


def relevant_test_files(units: list[Unit], i: int, tree: Path) -> list[str]:
    """The test files tree ``i`` (pin + units[:i+1]) runs besides upstream's suite.

    The unit's own tests, and those of each earlier unit that changes a source
    file this unit changes too: a unit can only break another's tests through
    code both touch. (Every unit's tests run together on the last tree, the
    install: tests/tools/test_vendor_build.py.)
    """
    mine = source_files(units[i])
    wanted = set(own_test_files(units[i]))
    for earlier in units[:i]:
        if source_files(earlier) & mine:
            wanted |= set(own_test_files(earlier))
    return [rel for rel in tree_test_files(tree) if rel in wanted]


@dataclass(frozen=True)
class TreePlan:
    """What one tree's pytest run is: the unit, its tree, the units' test files
    beside upstream's suite, and the run (None: nothing to run)."""

    unit: Unit
    tree: Path
    where: str
    files: list[str]
    run: TreeRun | None


def plan_tree(
    suite: Path | None,
    unit: Unit,
    tree: Path,
    where: str,
    files: list[str] | None = None,
) -> TreePlan:
    """One pytest on the tree: upstream's suite and the units' tests ``files``
    (default: every unit's tests so far)."""
    files = tree_test_files(tree) if files is None else files
    run = None
    if suite is not None:
        cwd = suite_workdir(suite, tree, tree.parent / f"{tree.name}.run")
        run = TreeRun(unit.name, cwd, tree / "src", ["tests/unit", *files])
    elif files:
        run = TreeRun(unit.name, tree, tree / "src", files)
    return TreePlan(unit, tree, where, files, run)


def judge_tree(
    plan: TreePlan, suite: Path | None, report: PytestReport | None
) -> UnitReport:
    """The unit's verdict from its tree's pytest report (None: nothing ran)."""
    own = OwnResult(plan.files, own=own_test_files(plan.unit))
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
    if suite is not None:
        baseline = read_baseline(suite)
        passed = set(report.ids("passed"))
        lost = sorted(baseline - passed)
        suite_result = SuiteResult(
            0 if report.reported else report.rc,
            len(baseline) - len(lost),
            len(baseline),
            lost,
            report.tail,
        )
        if not report.reported:
            own.failed.append(f"(pytest wrote no report, rc={report.rc})")
    return UnitReport(plan.unit.name, plan.where, suite_result, own, report.seconds)


def _line(r: UnitReport) -> str:
    if r.skipped:
        return f"  {r.unit:40} {r.skipped}"
    if r.suite is None:
        suite = "suite skipped"
    elif r.suite.total is None:
        suite = f"suite gave no result (rc={r.suite.rc})"
    else:
        lost = len(r.suite.regressed)
        suite = f"suite {r.suite.passed}/{r.suite.total} ({lost} regressed)"
    own = "units' tests: none"
    if r.own.files:
        n = len(r.own.files)
        own = f"units' {r.own.passed} passed, {len(r.own.failed)} failed "
        own += f"({n} file{'s' if n > 1 else ''}, {len(r.own.own)} its own)"
    if r.dropin is not None:
        unstated = len(r.dropin.findings) + len(r.dropin.stale)
        own += " drop-in " + ("ok" if r.dropin.ok else f"{unstated} unstated")
    return f"  {r.unit:40} {suite:30} {own:50} {r.seconds:6.0f} s  " + (
        "ok" if r.ok else "FAIL"
    )


def _problems(r: UnitReport) -> list[str]:
    out: list[str] = []
    if r.suite is not None:
        out += [f"{r.unit}: upstream test regressed: {t}" for t in r.suite.regressed]
        if r.suite.rc != 0 and not r.suite.regressed:
            out.append(
                f"{r.unit}: upstream suite failed (rc={r.suite.rc}):\n{r.suite.tail}"
            )
    out += [f"{r.unit}: unit test failed: {t}" for t in r.own.failed]
    if r.dropin is not None and not r.dropin.ok:
        out.append(
            f"{r.unit}: drop-in check against the pin:\n{dropin_report(r.dropin)}"
        )
    if r.own.failed:
        out.append(f"{r.unit}: pytest said:\n{r.own.tail}")
    return out


def prepare_trees(
    units: list[Unit], wanted: set[str], stage: Path, scratch: Path, python: str
) -> tuple[list[tuple[Unit, Path, str]], tuple[str, str] | None]:
    """Apply the units one by one to ``stage``; copy it out after each wanted one.

    Returns (unit, its tree, where `speculators` is imported from) per wanted unit
    that applies, and (name, why) of the first unit that does not apply (or None).
    """
    trees: list[tuple[Unit, Path, str]] = []
    for i, unit in enumerate(units):
        try:
            apply_unit(unit, stage)
        except VendorError as err:
            return trees, (unit.name, str(err))
        if unit.name in wanted:
            tree = scratch / f"{i + 1:02d}-{unit.name}"
            shutil.copytree(stage, tree, symlinks=True)
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


def _summarize(
    reports: list[UnitReport],
    units: list[Unit],
    wanted: set[str],
    broken: tuple[str, str] | None,
    total: float,
    pin: Pin,
    json_out: Path | None,
) -> int:
    """Print the problems and the verdict line, write ``json_out``; exit code."""
    order = {u.name: i for i, u in enumerate(units)}
    reports.sort(key=lambda r: order[r.unit])
    bad = [r.unit for r in reports if not r.ok]
    for r in reports:
        for p in _problems(r):
            print(f"problem: {p}")
    tested = len(reports)
    if broken is not None:
        name, why = broken
        bad.append(name)
        tested += 1
        later = [u.name for u in units[order[name] + 1 :] if u.name in wanted]
        print(f"problem: {name}: does not apply after the units before it:\n{why}")
        if later:
            print(f"problem: not tested (an earlier unit does not apply): {later}")
    print(
        f"test-series: {tested - len(bad)}/{tested} units pass"
        + (f"; failing: {', '.join(bad)}" if bad else "")
        + f" ({total:.0f} s)"
    )
    if json_out is not None:
        data = {
            "upstream": f"{pin.name} {pin.version}",
            "seconds": round(total, 1),
            "units": [{**asdict(r), "ok": r.ok} for r in reports],
            "does_not_apply": broken and {"unit": broken[0], "why": broken[1]},
        }
        json_out.write_text(json.dumps(data, indent=2) + "\n")
    return 1 if bad else 0


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
) -> int:
    """Test each (selected) unit on pin + units up to it; print a line per unit.

    ``dropin``: also run the drop-in check (`dropin.check`) on each tree against
    the pin, held to the differences the tree's units state.
    """
    _check_suite(suite)
    pin = load_pin(root)
    units = load_series(root)
    wanted = select_units(units, units_arg)
    scratch = _scratch_outside_git()
    reports: list[UnitReport] = []
    start = time.monotonic()
    try:
        sdist_path = obtain(pin.name, pin.version, pin.sdist, pin.sha256, sdist)
        stage = extract(sdist_path, scratch / "stage")
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
                print(_line(skipped), flush=True)
        checked = (
            _dropin_checks(
                root, python, trees, extract(sdist_path, scratch / "pristine"), jobs
            )
            if dropin and trees
            else {}
        )
        # Later trees hold more tests: start them first, so that no job is
        # left alone with the longest tree at the end.
        index = {u.name: i for i, u in enumerate(units)}
        plans = {
            t[0].name: plan_tree(
                suite, *t, files=relevant_test_files(units, index[t[0].name], t[1])
            )
            for t in reversed(trees)
        }

        def judged(name: str, report: PytestReport | None) -> None:
            result = judge_tree(plans[name], suite, report)
            result.dropin = checked.get(name)
            reports.append(result)
            print(_line(result), flush=True)

        for name, plan in plans.items():
            if plan.run is None:
                judged(name, None)
        run_pytest_forked(
            python,
            [p.run for p in plans.values() if p.run is not None],
            tree_env(None, one_thread=jobs > 1),
            max(1, jobs),
            TIMEOUT_S,
            judged,
        )
    finally:
        if keep:
            print(f"trees kept under {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    return _summarize(
        reports, units, wanted, broken, time.monotonic() - start, pin, json_out
    )
