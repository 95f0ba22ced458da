"""Fresh interpreters for the drop-in cases, cheaply: forked from a warm parent.

``python -m seriescheck.dropin.forkserver JOB OUT`` reads the job (trees, cases,
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
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from ..forkpool import Job, exit_now, preload, run_all, third_party
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


def _discover() -> list[str]:
    """In a child: import what the cases import; the third-party modules loaded."""
    import pkgutil

    for module in ("speculators", "speculators.models", "speculators.__main__"):
        importlib.import_module(module)
    cli = importlib.import_module("speculators.cli")
    for info in pkgutil.iter_modules(cli.__path__):
        with contextlib.suppress(Exception):
            importlib.import_module(f"speculators.cli.{info.name}")
    return third_party(list(sys.modules))


def _placeholders(text: str) -> str:
    """The tree's location (and the temp folder) as placeholders: trees differ there."""
    spec = sys.modules.get("speculators")
    where = getattr(spec, "__file__", None)
    if where:
        text = text.replace(str(Path(where).parent.parent), "<src>")
    return text.replace(tempfile.gettempdir(), "<tmp>")


def _in_tree(tree: str, src: str | None, work: Callable[[], Any]) -> Any:
    _enter_tree(tree, src)
    return work()


def _run_all(jobs: list[Job], parallel: int) -> dict[str, Any]:
    return run_all(jobs, parallel, CASE_TIMEOUT_S, rewrite=_placeholders)


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
    found = _run_all(
        [Job(t, partial(_in_tree, t, trees[t], _discover), True) for t in discover],
        parallel,
    )
    for tree, got in found.items():
        if "error" in got:
            raise RuntimeError(f"{tree}: importing speculators failed: {got['error']}")
    preload(m for got in found.values() for m in got["ok"])
    cases = [_case(c) for c in job["cases"]]
    only: dict[str, list[str]] = job.get("only") or {}
    work = [
        Job(
            f"{tree}\0{case.name}",
            partial(_in_tree, tree, src, partial(run_case, case, tree)),
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
    exit_now(main(sys.argv[1:]))
