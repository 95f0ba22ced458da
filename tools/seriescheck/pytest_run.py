"""Run pytest on a source tree and read its JUnit report: the one way tools/ does it.

`test-series` (each unit's tree), `rebase` (the rebased tree) and the tests all ask
the same question: which tests of this tree pass, imported from which `src/`. The
answer comes from pytest's own JUnit XML (``junit_family=xunit1``, which records
each test's file), never from parsing its console output.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from vendorlib.proc import captured

#: The folder that holds `seriescheck` (for ``python -m seriescheck.pytest_server``).
TOOLS = Path(__file__).resolve().parents[1]

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
    seconds: float = 0.0


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
        seconds = float(tc.get("time") or 0)
        outcomes.append(Outcome(name, tc.get("file") or "", status, seconds))
    return outcomes


def junit_path(cwd: Path) -> Path:
    """Where a run in ``cwd`` writes its JUnit report (read, then removed)."""
    return cwd / ".pytest-run-junit.xml"


def pytest_args(junit: Path, targets: list[str]) -> list[str]:
    """pytest's arguments for a run with upstream's suite options and a JUnit report."""
    return [
        "-q",
        "-p",
        "no:randomly",
        "--continue-on-collection-errors",
        "-o",
        "junit_family=xunit1",
        f"--junitxml={junit}",
        *targets,
    ]


def _read_report(rc: int, text: str, junit: Path, seconds: float) -> PytestReport:
    report = PytestReport(rc, tail="\n".join(text.splitlines()[-30:]), seconds=seconds)
    if junit.is_file():
        report.outcomes = read_junit(junit)
        junit.unlink()
    return report


def run_pytest(
    python: str,
    cwd: Path,
    targets: list[str],
    env: dict[str, str],
    timeout: float = 1800,
) -> PytestReport:
    """``python -m pytest TARGETS`` in ``cwd`` with upstream's suite options."""
    junit = junit_path(cwd)
    junit.unlink(missing_ok=True)
    cmd = [python, "-m", "pytest", *pytest_args(junit, targets)]
    start = time.monotonic()
    try:
        proc = captured(cmd, cwd=cwd, env=env, timeout=timeout)
        rc, text = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as err:
        rc, text = 124, f"pytest ran past {timeout:.0f} s: {err}"
    return _read_report(rc, text, junit, time.monotonic() - start)


@dataclass(frozen=True)
class TreeRun:
    """One pytest run of `PytestServer`: where, importing which `src/`, what, and
    where to record its test files' imports (`impact.ImportRecorder`; None: not)."""

    key: str
    cwd: Path
    src: Path
    targets: list[str]
    record: Path | None = None


class PytestServer:
    """Runs as ``run_pytest`` would, ``jobs`` at a time as they are submitted, in
    interpreters forked from one warm parent (`pytest_server`), which imports
    torch, transformers and datasets once for all of them.

    ``env`` is the parent's (the one every run shares; each run's ``PYTHONPATH``
    is its ``src``).
    """

    def __init__(self, python: str, env: dict[str, str], jobs: int, timeout: float):
        self.work = Path(tempfile.mkdtemp(prefix="pytest-server-"))
        (self.work / "job.json").write_text(
            json.dumps({"jobs": jobs, "timeout_s": timeout})
        )
        self.proc = subprocess.Popen(
            [python, "-m", "seriescheck.pytest_server", str(self.work / "job.json")],
            env={**env, "PYTHONPATH": str(TOOLS)},
            cwd=self.work,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.count = 0
        # Submitted and not yet reported (running or waiting for a slot).
        self.queued: dict[str, tuple[TreeRun, Path]] = {}

    def submit(self, runs: list[TreeRun]) -> None:
        """Queue ``runs``; they start as the runs before them leave room."""
        assert self.proc.stdin is not None
        raws = []
        for run in runs:
            junit = junit_path(run.cwd)
            junit.unlink(missing_ok=True)
            self.count += 1
            raws.append(
                {
                    "key": run.key,
                    "cwd": str(run.cwd),
                    "src": str(run.src),
                    "targets": run.targets,
                    "args": pytest_args(junit, run.targets),
                    "log": str(self.work / f"{self.count}.log"),
                    "record": run.record and str(run.record),
                }
            )
            self.queued[run.key] = (run, self.work / f"{self.count}.log")
        self.proc.stdin.write(json.dumps(raws) + "\n")
        self.proc.stdin.flush()

    def next_report(self) -> tuple[TreeRun, PytestReport]:
        """The next run to end (of those submitted), and its report."""
        assert self.proc.stdout is not None and self.queued
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"pytest server failed (rc={self.proc.wait()})")
        done = json.loads(line)
        run, log = self.queued.pop(done["key"])
        text = log.read_text(errors="replace") if log.is_file() else ""
        if "error" in done:
            text += f"\n(pytest's interpreter: {done['error']})"
        report = _read_report(
            done.get("ok", 124), text, junit_path(run.cwd), done.get("seconds", 0.0)
        )
        return run, report

    def __enter__(self) -> PytestServer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        rc = self.proc.wait()
        shutil.rmtree(self.work, ignore_errors=True)
        if rc != 0 and exc[0] is None:
            raise RuntimeError(f"pytest server failed (rc={rc})")
