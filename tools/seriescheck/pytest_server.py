"""Many pytest runs, each in a fresh interpreter forked from a warm parent.

``python -m seriescheck.pytest_server JOB`` reads runs from stdin as they come,
one JSON list a line (each run: a folder, the `src/` to import `speculators` from,
pytest's arguments, a log file, where to record its imports or null). For the
first line it first forks one child that collects the first run's tests and
reports the third-party modules that collection loaded. The parent imports
those (`forkpool.preload`), then forks one child per run: the child enters the
run's folder, puts its `src/` first on ``sys.path`` and in ``PYTHONPATH`` (for
the subprocesses tests start), and calls ``pytest.main`` with its output in the
log. So each run pays for its tree's own
imports and tests, not torch's, transformers' and datasets' imports again. One
JSON line per finished run goes to stdout as it finishes; the server ends when
stdin does and every run has.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import sys
from functools import partial
from pathlib import Path
from typing import Any

from .forkpool import OWN_PACKAGES, Job, exit_now, preload, run_all, third_party


def _enter(run: dict[str, Any], log: str | None) -> None:
    # Not the server's stdin, where runs arrive while this one is alive: a test
    # (or a process it starts) that read it would take them.
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    if log is not None:
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
    os.chdir(run["cwd"])
    # As ``PYTHONPATH=src python -m pytest`` would have it: the folder, then src.
    sys.path[:0] = [run["cwd"], run["src"]]
    os.environ["PYTHONPATH"] = run["src"]
    importlib.invalidate_caches()


def _pytest(run: dict[str, Any]) -> int:
    import pytest

    _enter(run, run["log"])
    if not run.get("record"):
        return int(pytest.main(run["args"]))
    from .impact import ImportRecorder

    roots = {str(Path(run[k]).resolve()): p for k, p in (("src", "src/"), ("cwd", ""))}
    roots.update({run["src"]: "src/", run["cwd"]: ""})
    recorder = ImportRecorder(roots, Path(run["record"]))
    recorder.install()
    return int(pytest.main(run["args"], plugins=[recorder]))


def _outside(module: Any, folders: tuple[str, ...]) -> bool:
    """Whether ``module`` was loaded from none of ``folders`` (unknown: no)."""
    try:
        paths = [getattr(module, "__file__", None), *getattr(module, "__path__", [])]
        return not any(str(p).startswith(folders) for p in paths if p)
    except Exception:  # a lazy or odd module that will not say: leave it out
        return False


def _collected_modules(run: dict[str, Any]) -> list[str]:
    """In a child: collect the run's tests; the installed modules that loaded
    (not the tree's, not the tests and their conftests)."""
    import pytest

    _enter(run, os.devnull)
    pytest.main(["--collect-only", "-q", *run["targets"]])
    mine = (str(Path(run["cwd"]).resolve()), run["cwd"], run["src"])
    return [
        name
        for name in third_party(list(sys.modules))
        if _outside(sys.modules[name], mine)
    ]


def _preload(runs: list[dict[str, Any]]) -> None:
    """Import the third-party modules the first run's collection loads."""
    found = run_all([Job("discover", partial(_collected_modules, runs[0]))], 1, 600)
    if "error" in found["discover"]:
        print(
            f"pytest server: no preloading: {found['discover']['error']}",
            file=sys.stderr,
        )
    preload(found["discover"].get("ok", []))
    loaded = {m.partition(".")[0] for m in sys.modules} & OWN_PACKAGES - {"__main__"}
    if loaded:
        raise RuntimeError(f"preloading imported {loaded}: each run imports it afresh")


class Lines:
    """Whole lines from a file descriptor (the server's stdin), without blocking
    unless asked (a buffered ``readline`` could hold a second line that
    ``select`` misses)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""
        self.closed = False

    def take(self, wait: bool) -> list[str] | None:
        """The lines now complete (waiting for one if ``wait``); None at the end."""
        while not self.closed and (wait or select.select([self.fd], [], [], 0)[0]):
            chunk = os.read(self.fd, 1 << 16)
            self.closed = not chunk
            self.buffer += chunk
            if b"\n" in self.buffer:
                break
        *lines, self.buffer = self.buffer.split(b"\n")
        if self.closed and not lines:
            return None
        return [line.decode() for line in lines if line.strip()]


class _ClientGone(Exception):
    """Stdin ended: the client has every report it wants (or has given up)."""


def serve(job: dict[str, Any]) -> None:
    """Runs from stdin as they come, ``jobs`` alive at once, ``timeout_s`` each;
    when stdin ends, whatever still runs is killed (the client reads every
    report before it closes stdin, so only a client that failed leaves any)."""

    def tell(key: str, result: dict[str, Any]) -> None:
        print(json.dumps({"key": key, **result}), flush=True)

    stdin = Lines(sys.stdin.fileno())
    preloaded = False

    def feed(idle: bool) -> list[Job]:
        nonlocal preloaded
        lines = stdin.take(wait=idle)
        if lines is None:
            raise _ClientGone
        runs = [run for line in lines for run in json.loads(line)]
        if runs and not preloaded:  # idle: no child of the pool is alive yet
            _preload(runs)
            preloaded = True
        return [Job(run["key"], partial(_pytest, run)) for run in runs]

    with contextlib.suppress(_ClientGone):  # run_all kills its children
        jobs, timeout = int(job["jobs"]), float(job["timeout_s"])
        run_all([], jobs, timeout, on_result=tell, feed=feed)


def main(argv: list[str]) -> int:
    serve(json.loads(Path(argv[0]).read_text()))
    return 0


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
