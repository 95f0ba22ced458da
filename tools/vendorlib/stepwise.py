"""`tools/vendor test-series`: every unit, applied with the ones before it, tested.

For unit i of the series, the pristine pin plus units 1..i is copied into a scratch
tree outside any git repository (upstream's provenance code looks for an enclosing
`.git` and writes a `speculators.patch` sidecar where it finds one). On that tree,
imported from its `src/` (``PYTHONPATH``): (a) upstream's own unit tests (the
`upstream-suite` folder's `run.sh`, which lists the baseline tests that regressed)
and (b) the unit's own tests, the `test_*.py` files under `tests/` that the unit adds
(`files/`) or changes (`changes.patch`), with `python -m pytest` from the tree root.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import VendorError
from .pin import Unit, load_pin, load_series
from .sdist import extract, obtain
from .units import apply_unit

_DIFF = re.compile(r"^diff --git a/(?P<a>\S+) b/(?P<b>\S+)$")
_SUITE_LAST = re.compile(
    r"^upstream suite: (?P<passed>\d+)/(?P<total>\d+) baseline tests still pass"
)
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
    files: list[str]
    rc: int | None = None
    passed: int = 0
    failed: list[str] = field(default_factory=list)
    tail: str = ""


@dataclass
class UnitReport:
    unit: str
    imported_from: str
    suite: SuiteResult | None
    own: OwnResult
    seconds: float

    @property
    def ok(self) -> bool:
        suite_ok = self.suite is None or (
            self.suite.rc == 0 and not self.suite.regressed
        )
        return suite_ok and not self.own.failed


def tree_env(tree: Path) -> dict[str, str]:
    """The environment that imports `speculators` from ``tree``/src, nothing else."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree / "src")
    env["HF_HUB_OFFLINE"] = "1"
    env.pop("PYTHONHOME", None)
    return env


def imported_from(python: str, tree: Path, cwd: Path) -> str:
    """Where ``python`` imports `speculators` from with :func:`tree_env`; checked."""
    proc = subprocess.run(
        [python, "-c", _WHERE],
        cwd=cwd,
        env=tree_env(tree),
        capture_output=True,
        text=True,
        check=False,
    )
    where = proc.stdout.strip()
    src = (tree / "src").resolve()
    if proc.returncode != 0 or not Path(where).resolve().is_relative_to(src):
        raise VendorError(
            f"{python} imports speculators from {where or '(nothing)'}, not from "
            f"{src}: {proc.stderr.strip()[-500:]}"
        )
    return where


def run_suite(python: str, suite: Path, tree: Path) -> SuiteResult:
    """Upstream's suite (`run.sh`) against ``tree``/src: what it says regressed."""
    proc = subprocess.run(
        ["bash", str(suite / "run.sh")],
        env={**tree_env(tree), "PY": python},
        capture_output=True,
        text=True,
        check=False,
    )
    lines = proc.stdout.splitlines()
    result = SuiteResult(proc.returncode, tail="\n".join(lines[-20:]) + proc.stderr)
    result.regressed = [
        ln.removeprefix("regressed: ") for ln in lines if ln.startswith("regressed: ")
    ]
    for ln in lines:
        if m := _SUITE_LAST.match(ln):
            result.passed, result.total = int(m["passed"]), int(m["total"])
    return result


def run_own_tests(python: str, tree: Path, files: list[str]) -> OwnResult:
    """`python -m pytest FILES` from the tree root: passed count, failed test ids."""
    result = OwnResult(files)
    if not files:
        return result
    junit = tree / ".test-series-junit.xml"
    proc = subprocess.run(
        [python, "-m", "pytest", "-q", f"--junitxml={junit}", *files],
        cwd=tree,
        env=tree_env(tree),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    result.rc = proc.returncode
    result.tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
    if not junit.is_file():
        result.failed = [f"(pytest wrote no report, rc={proc.returncode})"]
        return result
    for tc in ET.parse(junit).getroot().iter("testcase"):
        kinds = {ch.tag for ch in tc}
        name = f"{tc.get('classname')}::{tc.get('name')}"
        if kinds & {"failure", "error"}:
            result.failed.append(name)
        elif "skipped" not in kinds:
            result.passed += 1
    if proc.returncode != 0 and not result.failed:  # 5: it collected nothing
        result.failed = [f"(pytest exited {proc.returncode})"]
    return result


def _line(r: UnitReport) -> str:
    if r.suite is None:
        suite = "suite skipped"
    elif r.suite.total is None:
        suite = f"suite gave no result (rc={r.suite.rc})"
    else:
        lost = len(r.suite.regressed)
        suite = f"suite {r.suite.passed}/{r.suite.total} ({lost} regressed)"
    own = "own tests: none"
    if r.own.files:
        n = len(r.own.files)
        own = f"own {r.own.passed} passed, {len(r.own.failed)} failed "
        own += f"({n} file{'s' if n > 1 else ''})"
    return f"  {r.unit:40} {suite:30} {own:38} {r.seconds:6.0f} s  " + (
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
    out += [f"{r.unit}: own test failed: {t}" for t in r.own.failed]
    if r.own.failed:
        out.append(f"{r.unit}: pytest said:\n{r.own.tail}")
    return out


def check_tree(
    python: str, suite: Path | None, unit: Unit, tree: Path, where: str
) -> UnitReport:
    """Upstream's suite, then the unit's own tests, on one materialized tree."""
    t0 = time.monotonic()
    suite_result = run_suite(python, suite, tree) if suite else None
    own = run_own_tests(python, tree, own_test_files(unit))
    return UnitReport(unit.name, where, suite_result, own, time.monotonic() - t0)


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


def run_series(
    root: Path,
    python: str,
    suite: Path | None,
    units_arg: str | None = None,
    json_out: Path | None = None,
    sdist: Path | None = None,
    keep: bool = False,
    jobs: int = 1,
) -> int:
    """Test each (selected) unit on pin + units up to it; print a line per unit."""
    if suite is not None and not (suite / "run.sh").is_file():
        raise VendorError(f"--upstream-suite {suite}: no run.sh there")
    pin = load_pin(root)
    units = load_series(root)
    wanted = select_units(units, units_arg)
    scratch = Path(tempfile.mkdtemp(prefix="vendor-test-series-"))
    repo = enclosing_git(scratch)
    if repo is not None:
        shutil.rmtree(scratch)
        raise VendorError(
            f"{scratch} lies inside the git repository {repo}; upstream's provenance "
            "code would write sidecars there. Set TMPDIR to a folder outside any "
            "git repository."
        )
    reports: list[UnitReport] = []
    start = time.monotonic()
    try:
        stage = extract(
            obtain(pin.name, pin.version, pin.sdist, pin.sha256, sdist),
            scratch / "stage",
        )
        trees, broken = prepare_trees(units, wanted, stage, scratch, python)
        print(
            f"{pin.name} {pin.version} + each unit with the ones before it: "
            f"{len(trees)} of {len(units)} units, {jobs} at a time; "
            f"scratch {scratch}; python {python}",
            flush=True,
        )
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = [pool.submit(check_tree, python, suite, *t) for t in trees]
            for future in as_completed(futures):
                report = future.result()
                reports.append(report)
                print(_line(report), flush=True)
    finally:
        if keep:
            print(f"trees kept under {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    total = time.monotonic() - start
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
