"""What `tools/vendor test-series` found on each unit's tree: the per-unit results,
their one-line summary, the problems spelled out, the verdict and its JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from vendorlib.pin import Pin, Unit

from .dropin.compare import Comparison
from .dropin.compare import report as dropin_report


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


def line(r: UnitReport) -> str:
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


def problems(r: UnitReport) -> list[str]:
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


def summarize(
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
        for p in problems(r):
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
