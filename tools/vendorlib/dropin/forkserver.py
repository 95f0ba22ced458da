"""Fresh interpreters for the drop-in cases, cheaply: forked from a warm parent.

``python -m vendorlib.dropin.forkserver JOB OUT`` reads the job (trees, cases,
parallel jobs), and first forks one child per tree that imports what the cases
will (the package, its models, every command's module) and reports every
third-party module that loaded. The parent imports those (torch, transformers,
datasets ...) but no `speculators` module, then forks one child per (tree, case):
each child starts where a fresh interpreter would be after the third-party
imports, puts its tree's `src/` first on ``sys.path`` (none for the install),
runs the case and writes its result. So each case costs `speculators`' own
imports, not torch's and transformers' again.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from .cases import Case, run_case

#: A case that runs longer is killed and recorded as such.
CASE_TIMEOUT_S = 300


def _enter_tree(tree: str, src: str | None) -> None:
    if src is not None:
        sys.path.insert(0, src)
        if tree != "pristine":
            # A source tree of ours carries upstream's egg-info (from the sdist):
            # beside the install, speculators_kimi would warn that both are
            # installed, which is this check's set-up, not a user's.
            from speculators_kimi.install_check import UpstreamConflictWarning

            warnings.simplefilter("ignore", UpstreamConflictWarning)
    importlib.invalidate_caches()
    for name, value in {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}.items():
        os.environ.setdefault(name, value)


def _own_modules(name: str) -> bool:
    top = name.partition(".")[0]
    return top in {"speculators", "speculators_kimi", "__main__"}


def _discover() -> list[str]:
    """In a child: import what the cases import; the third-party modules loaded."""
    import pkgutil

    for module in ("speculators", "speculators.models", "speculators.__main__"):
        importlib.import_module(module)
    cli = importlib.import_module("speculators.cli")
    for info in pkgutil.iter_modules(cli.__path__):
        with contextlib.suppress(Exception):
            importlib.import_module(f"speculators.cli.{info.name}")
    return [m for m in list(sys.modules) if not _own_modules(m)]


def _placeholders(text: str) -> str:
    """The tree's location (and the temp folder) as placeholders: trees differ there."""
    spec = sys.modules.get("speculators")
    where = getattr(spec, "__file__", None)
    if where:
        text = text.replace(str(Path(where).parent.parent), "<src>")
    return text.replace(tempfile.gettempdir(), "<tmp>")


@dataclass(frozen=True)
class Job:
    """One forked child: its result's key, what it runs, on which tree."""

    key: str
    work: Callable[[], Any]
    tree: str
    src: str | None
    quiet: bool


def _child(job: Job, result: Path) -> None:
    """Run the job in a forked child; write ``{"ok": value}`` or the error."""
    started = time.monotonic()
    try:
        if job.quiet:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
        _enter_tree(job.tree, job.src)
        payload: dict[str, Any] = {"ok": job.work()}
    except BaseException as err:  # reported, not raised: this is a child
        payload = {"error": f"{type(err).__name__}: {err}"}
    payload["seconds"] = round(time.monotonic() - started, 2)
    try:
        result.write_text(_placeholders(json.dumps(payload, sort_keys=True)))
    finally:
        os._exit(0)


def _fork(job: Job, result: Path) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(job, result)
    return pid


def _run_all(jobs: list[Job], parallel: int) -> dict[str, Any]:
    """Fork each job with at most ``parallel`` alive: {job key: its result}."""
    scratch = Path(tempfile.mkdtemp(prefix="dropin-"))
    pending = list(enumerate(jobs))
    alive: dict[int, tuple[int, float]] = {}
    results: dict[str, Any] = {}
    while pending or alive:
        while pending and len(alive) < parallel:
            i, job = pending.pop(0)
            alive[_fork(job, scratch / f"{i}.json")] = (i, time.monotonic())
        pid, _ = os.waitpid(-1, os.WNOHANG)
        if pid:
            i, _ = alive.pop(pid)
            path = scratch / f"{i}.json"
            results[jobs[i].key] = (
                json.loads(path.read_text())
                if path.is_file()
                else {"error": "the case's interpreter died without a result"}
            )
            continue
        for pid, (i, started) in list(alive.items()):
            if time.monotonic() - started > CASE_TIMEOUT_S:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                alive.pop(pid)
                results[jobs[i].key] = {"error": f"timed out after {CASE_TIMEOUT_S} s"}
        time.sleep(0.02)
    shutil.rmtree(scratch, ignore_errors=True)
    return results


def _case(raw: dict[str, Any]) -> Case:
    return Case(
        name=raw["name"],
        package=raw["package"],
        names=tuple(raw["names"]),
        argvs=tuple(tuple(a) for a in raw["argvs"]),
        checkpoints=tuple(raw["checkpoints"]),
    )


def serve(job: dict[str, Any]) -> dict[str, Any]:
    """Every (tree, case) of ``job``: {tree: {case name: result}}.

    ``job``: ``trees`` (name -> `src/` or None for the install), ``cases``,
    ``jobs`` (children alive at once), and optionally ``discover`` (the trees
    whose imports are discovered; all by default) and ``only`` (tree -> the
    names of the cases to run on it; all by default).
    """
    trees: dict[str, str | None] = job["trees"]
    parallel = int(job.get("jobs", 2))
    discover = job.get("discover") or list(trees)
    found = _run_all([Job(t, _discover, t, trees[t], True) for t in discover], parallel)
    for tree, got in found.items():
        if "error" in got:
            raise RuntimeError(f"{tree}: importing speculators failed: {got['error']}")
    for name in dict.fromkeys(m for got in found.values() for m in got["ok"]):
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    cases = [_case(c) for c in job["cases"]]
    only: dict[str, list[str]] = job.get("only") or {}
    work = [
        Job(
            f"{tree}\0{case.name}",
            partial(run_case, case, tree),
            tree,
            src,
            case.kind == "api",
        )
        for case in cases
        for tree, src in trees.items()
        if tree not in only or case.name in only[tree]
    ]
    out: dict[str, dict[str, Any]] = {tree: {} for tree in trees}
    for key, value in _run_all(work, parallel).items():
        tree, name = key.split("\0")
        out[tree][name] = value
    return out


def main(argv: list[str]) -> int:
    job_path, out_path = (Path(a) for a in argv)
    started = time.monotonic()
    out = serve(json.loads(job_path.read_text()))
    out_path.write_text(
        json.dumps({"results": out, "seconds": time.monotonic() - started}) + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
