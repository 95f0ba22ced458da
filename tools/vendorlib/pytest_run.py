"""Run pytest on a source tree and read its JUnit report: the one way tools/ does it.

`test-series` (each unit's tree), `rebase` (the rebased tree) and the tests all ask
the same question: which tests of this tree pass, imported from which `src/`. The
answer comes from pytest's own JUnit XML (``junit_family=xunit1``, which records
each test's file), never from parsing its console output.
"""

from __future__ import annotations

import os
import subprocess
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

#: Environment variables that make torch (and its BLAS) use one thread: for
#: pytest processes that run side by side on a small machine.
ONE_THREAD = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


@dataclass
class Outcome:
    """One test case of the report: its id (upstream's baseline spelling) and file."""

    id: str
    file: str
    status: str  # passed, failed (failure or error) or skipped


@dataclass
class PytestReport:
    """What one pytest process said, read from its JUnit report."""

    rc: int
    outcomes: list[Outcome] = field(default_factory=list)
    tail: str = ""
    seconds: float = 0.0

    @property
    def reported(self) -> bool:
        return bool(self.outcomes) or self.rc in (0, 5)

    def ids(self, status: str) -> list[str]:
        return [o.id for o in self.outcomes if o.status == status]

    def in_files(self, files: set[str]) -> list[Outcome]:
        return [o for o in self.outcomes if o.file in files]

    def summary(self) -> str:
        counts = {s: len(self.ids(s)) for s in ("passed", "failed", "skipped")}
        return ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no tests"


def tree_env(src: Path | None, one_thread: bool = False) -> dict[str, str]:
    """The environment that imports `speculators` from ``src`` (or the install)."""
    env = dict(os.environ)
    env.pop("PYTHONHOME", None)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    else:
        env.pop("PYTHONPATH", None)
    env["HF_HUB_OFFLINE"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if one_thread:
        env.update(ONE_THREAD)
    return env


def read_junit(junit: Path) -> list[Outcome]:
    """Each test case of a JUnit report (xunit1: with its file)."""
    outcomes = []
    for tc in ET.parse(junit).getroot().iter("testcase"):
        kinds = {ch.tag for ch in tc}
        name = f"{tc.get('classname')}::{tc.get('name')}".replace("\n", "\\n")
        status = (
            "failed"
            if kinds & {"failure", "error"}
            else "skipped"
            if "skipped" in kinds
            else "passed"
        )
        outcomes.append(Outcome(name, tc.get("file") or "", status))
    return outcomes


def run_pytest(
    python: str,
    cwd: Path,
    targets: list[str],
    env: dict[str, str],
    timeout: float = 1800,
) -> PytestReport:
    """``python -m pytest TARGETS`` in ``cwd`` with upstream's suite options."""
    junit = cwd / ".pytest-run-junit.xml"
    junit.unlink(missing_ok=True)
    cmd = [
        python,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:randomly",
        "--continue-on-collection-errors",
        "-o",
        "junit_family=xunit1",
        f"--junitxml={junit}",
        *targets,
    ]
    start = time.monotonic()
    try:
        proc = subprocess.run(
            cmd,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        rc, text = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as err:
        rc, text = 124, f"pytest ran past {timeout:.0f} s: {err}"
    report = PytestReport(rc, tail="\n".join(text.splitlines()[-30:]))
    report.seconds = time.monotonic() - start
    if junit.is_file():
        report.outcomes = read_junit(junit)
        junit.unlink()
    return report
