"""Fresh interpreters, cheaply: children forked from a parent that has imported the
third-party modules (torch, transformers, datasets ...) but no `speculators` module.

A fresh ``python`` spends seconds importing torch and transformers before it reaches
the code under test. A child forked from a parent that imported them starts where
that interpreter would be after those imports, so each child costs only its own
work. The parent must not import a `speculators` (or `speculators_kimi`) module, so
each child still imports the tree it puts first on ``sys.path`` afresh. Used by the
drop-in check (`dropin.forkserver`) and the series' pytest runs (`pytest_server`).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The packages a parent must never import: each child imports them from its tree.
OWN_PACKAGES = {"speculators", "speculators_kimi", "__main__"}


@dataclass(frozen=True)
class Job:
    """One forked child: its result's key and what it runs (a JSON-able result)."""

    key: str
    work: Callable[[], Any]
    quiet: bool = False


def third_party(modules: Iterable[str]) -> list[str]:
    """The names in ``modules`` a parent may import (none of `OWN_PACKAGES`)."""
    return [m for m in modules if m.partition(".")[0] not in OWN_PACKAGES]


def preload(modules: Iterable[str]) -> None:
    """Import ``modules`` in the parent (those that fail to import are left out),
    then freeze what they made: the children's garbage collector never walks
    (nor, by touching, copies) the parent's objects."""
    for name in dict.fromkeys(third_party(modules)):
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    gc.collect()
    gc.freeze()


def _child(job: Job, result: Path, rewrite: Callable[[str], str]) -> None:
    """Run the job in a forked child; write ``{"ok": value}`` or the error."""
    started = time.monotonic()
    try:
        if job.quiet:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
        payload: dict[str, Any] = {"ok": job.work()}
    except BaseException as err:  # reported, not raised: this is a child
        payload = {"error": f"{type(err).__name__}: {err}"}
    payload["seconds"] = round(time.monotonic() - started, 2)
    try:
        result.write_text(rewrite(json.dumps(payload, sort_keys=True)))
    finally:
        os._exit(0)


def _fork(job: Job, result: Path, rewrite: Callable[[str], str]) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(job, result, rewrite)
    return pid


def run_all(
    jobs: list[Job],
    parallel: int,
    timeout_s: float,
    rewrite: Callable[[str], str] = str,
    on_result: Callable[[str, dict[str, Any]], None] | None = None,
    feed: Callable[[bool], list[Job] | None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Fork each job, at most ``parallel`` alive: {job key: its result}.

    A result is ``{"ok": value, "seconds": s}`` or ``{"error": why, ...}``; a child
    that runs past ``timeout_s`` is killed and recorded as such. ``rewrite`` turns
    a result's JSON text into what is stored; ``on_result`` hears each result as
    it arrives (for progress). ``feed`` adds jobs while the pool runs: asked at
    each turn (``True``: nothing else to do, it may wait), it gives more jobs, or
    None once no more will come; the pool ends only then.
    """
    scratch = Path(tempfile.mkdtemp(prefix="forkpool-"))
    pending = list(enumerate(jobs))
    alive: dict[int, tuple[int, float]] = {}
    results: dict[str, dict[str, Any]] = {}
    jobs = list(jobs)

    def record(i: int, value: dict[str, Any]) -> None:
        results[jobs[i].key] = value
        if on_result is not None:
            on_result(jobs[i].key, value)

    try:
        while pending or alive or feed is not None:
            if feed is not None:
                more = feed(not (pending or alive))
                if more is None:
                    feed = None
                for job in more or ():
                    pending.append((len(jobs), job))
                    jobs.append(job)
                if not (pending or alive):
                    continue
            while pending and len(alive) < parallel:
                i, job = pending.pop(0)
                pid = _fork(job, scratch / f"{i}.json", rewrite)
                alive[pid] = (i, time.monotonic())
            pid, _ = os.waitpid(-1, os.WNOHANG)
            if pid:
                i, _ = alive.pop(pid)
                path = scratch / f"{i}.json"
                record(
                    i,
                    json.loads(path.read_text())
                    if path.is_file()
                    else {"error": "the child interpreter died without a result"},
                )
                continue
            for pid, (i, started) in list(alive.items()):
                if time.monotonic() - started > timeout_s:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    alive.pop(pid)
                    record(
                        i,
                        {
                            "error": f"timed out after {timeout_s:.0f} s",
                            "seconds": round(time.monotonic() - started, 2),
                        },
                    )
            time.sleep(0.02)
    finally:
        for pid in alive:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(scratch, ignore_errors=True)
    return results


def exit_now(rc: int) -> None:
    """End a parent that preloaded: no interpreter teardown (the frozen objects
    are never freed, and native extensions such as triton's report each as a leak)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
