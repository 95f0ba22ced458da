"""Which of upstream's test files a unit's tree must run: those that can see it.

A deterministic test's outcome on tree k can differ from its outcome on tree k-1
only if unit k changes a file the test's run reads. `ImportRecorder` (a pytest
plugin, in the tree's own pytest run) records, per test file, the tree's files
its run can have loaded: every import its code, the tree's code or a library on
their behalf asks for (cached or not, ``import`` or `importlib.import_module`,
hence entry points), closed over the import edges the run saw; the names of
modules it asked for that did not exist; the package folders `pkgutil` listed.
A file that started a Python (a subprocess, a multiprocessing child: imports
that are not seen here) depends on everything (``*``). A run records only the
files it ran; the others keep their record (their run could not change).
"""

from __future__ import annotations

import builtins
import importlib._bootstrap as bootstrap
import json
import multiprocessing.process
import os
import pkgutil
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable, Generator, Iterable
from importlib.util import resolve_name
from pathlib import Path
from typing import Any

import pytest

#: A dependency on everything: the test started a Python we do not see into.
EVERYTHING = "*"


def keys(path: str) -> set[str]:
    """What a change to ``path`` (tree-relative) meets: itself and its folder's
    listing; None (``{"*"}``) when every test may see it: a conftest or package
    `__init__` of the tests, a file outside `src/` and `tests/`, package data."""
    p = Path(path)
    top = p.parts[0] if p.parts else ""
    if (
        top not in ("src", "tests")
        or p.suffix != ".py"
        or p.name == "conftest.py"
        or (top == "tests" and p.name == "__init__.py")
    ):
        return {EVERYTHING}
    return {path, f"dir:{p.parent.as_posix()}"}


def affected(
    deps: dict[str, list[str]], files: Iterable[str], touched: set[str]
) -> tuple[list[str], str]:
    """The test ``files`` whose recorded ``deps`` meet the ``touched`` paths (an
    unrecorded file: all), and why, in words."""
    met = set().union(*(keys(t) for t in touched))
    if EVERYTHING in met:
        wide = sorted(t for t in touched if EVERYTHING in keys(t))
        return sorted(files), f"touches {', '.join(wide[:3])}: everything"
    picked, hit = [], set()
    for f in files:
        seen = deps.get(f, [EVERYTHING])
        if EVERYTHING in seen or met & set(seen):
            picked.append(f)
            hit |= met & set(seen)
    named = sorted(h for h in hit if not h.startswith("dir:")) or sorted(hit)
    why = ", ".join(named[:3]) + (f" +{len(named) - 3}" if len(named) > 3 else "")
    if not why:
        n = len(touched)
        return picked, f"none imports what it touches ({n} file{'s' * (n > 1)})"
    return picked, f"touches {why}"


def affected_since(
    recorded: dict[str, tuple[int, list[str]]],
    files: Iterable[str],
    touched_after: Callable[[int], set[str]],
) -> tuple[list[str], str]:
    """The test ``files`` a tree must run, and why: each file whose imports, as
    recorded on tree ``r`` (``recorded[file] == (r, imports)``), meet what the
    units after ``r``, up to the tree's own, touch (``touched_after(r)``); every
    file no tree has recorded yet."""
    groups: dict[int, list[str]] = defaultdict(list)
    for f in files:
        groups[recorded[f][0] if f in recorded else -1].append(f)
    picked: list[str] = []
    whys: list[str] = []
    for r, group in sorted(groups.items()):
        if r < 0:
            picked += group
            whys.append("no imports recorded yet")
            continue
        got, why = affected({f: recorded[f][1] for f in group}, group, touched_after(r))
        picked += got
        whys.append(why)
    return sorted(picked), "; ".join(dict.fromkeys(whys))


class ImportRecorder:
    """pytest plugin: per test file, the tree files its run can have loaded.

    ``roots`` maps a folder to the prefix its files get (the tree's `src/` to
    ``src/``, the run's folder to ``""``); ``out``: the JSON written at the end.
    """

    def __init__(self, roots: dict[str, str], out: Path) -> None:
        self.roots = {os.path.join(k, ""): v for k, v in roots.items()}
        self.out = out
        self.edges: dict[str, set[str]] = defaultdict(set)
        self.context = ""  # the test file being collected or run ("": session)
        self._rel: dict[str, str | None] = {}

    def rel(self, filename: str | None) -> str | None:
        """``filename`` relative to the tree (None: not the tree's)."""
        if not filename:
            return None
        if filename not in self._rel:
            self._rel[filename] = next(
                (
                    p + filename[len(r) :]
                    for r, p in self.roots.items()
                    if filename.startswith(r)
                ),
                None,
            )
        return self._rel[filename]

    def _importer(self) -> str:
        """The innermost tree file on the stack (none: the current test file)."""
        frame = sys._getframe(1)
        while frame is not None:
            found = self.rel(frame.f_code.co_filename)
            if found is not None:
                return found
            frame = frame.f_back  # type: ignore[assignment]
        return self.context

    def saw(self, name: str, missing: bool = False) -> None:
        """The tree's code (or the test) imported ``name`` and its parents."""
        found = []
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            module = sys.modules.get(".".join(parts[:i]))
            path = self.rel(getattr(module, "__file__", None))
            if path is not None:
                found.append(path)
        if missing:  # not here: a unit that adds it (to a package here) changes the run
            stem = "/".join(parts)
            found += [
                f"{p}{stem}{s}"
                for r, p in self.roots.items()
                if os.path.isdir(r + parts[0])
                for s in (".py", "/__init__.py")
            ]
        if found:
            self.edges[self._importer()].update(found)

    def install(self) -> None:
        """Hook this interpreter's imports (for good: it ends with the run)."""
        real_import, real_gcd = builtins.__import__, vars(bootstrap)["_gcd_import"]
        real_iter, real_popen = pkgutil.iter_modules, subprocess.Popen.__init__
        real_start = multiprocessing.process.BaseProcess.start
        me = self

        def imp(
            name: str,
            globals: Any = None,
            locals: Any = None,
            fromlist: Any = (),
            level: int = 0,
        ) -> Any:
            try:
                module = real_import(name, globals, locals, fromlist, level)
            except ImportError as err:
                me.saw(err.name or name, missing=True)
                raise
            full = (
                resolve_name("." * level + name, (globals or {}).get("__package__"))
                if level
                else name
            )
            me.saw(full)
            for item in fromlist or ():
                if item != "*" and f"{full}.{item}" in sys.modules:
                    me.saw(f"{full}.{item}")
            return module

        def gcd(name: str, package: Any = None, level: int = 0) -> Any:
            full = resolve_name("." * level + name, package) if level else name
            try:
                module = real_gcd(name, package, level)
            except ImportError:
                me.saw(full, missing=True)
                raise
            me.saw(full)
            return module

        def iter_modules(path: Any = None, prefix: str = "") -> Any:
            for p in path or ():
                if (rel := me.rel(os.path.abspath(p) + os.sep)) is not None:
                    me.edges[me._importer()].add(f"dir:{rel.rstrip('/')}")
            return real_iter(path, prefix)

        def popen(self: Any, args: Any, *a: Any, **kw: Any) -> None:
            argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else args
            prog = os.fsdecode(argv[0]) if argv else ""
            if Path(prog).name.startswith("python") or (
                Path(prog).parent == Path(sys.executable).parent
            ):
                me.edges[me.context].add(EVERYTHING)
            real_popen(self, args, *a, **kw)

        def start(self: Any) -> None:
            me.edges[me.context].add(EVERYTHING)
            real_start(self)

        builtins.__import__ = imp
        vars(bootstrap)["_gcd_import"] = gcd  # what import_module calls
        pkgutil.iter_modules = iter_modules  # type: ignore[assignment]
        subprocess.Popen.__init__ = popen  # type: ignore[method-assign]
        multiprocessing.process.BaseProcess.start = start  # type: ignore[method-assign]

    def _within(self, path: Any) -> Generator[None, Any, Any]:
        before, self.context = self.context, self.rel(str(path)) or self.context
        try:
            return (yield)
        finally:
            self.context = before

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Any:
        if isinstance(collector, pytest.Module):
            return (yield from self._within(collector.path))
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Any:
        return (yield from self._within(item.path))

    def deps(self) -> dict[str, list[str]]:
        """Per test file that ran: every tree file reachable from it (and from
        the session's own imports) along the import edges seen."""
        out = {}
        for f in {*self.edges} - {""}:
            if not Path(f).name.startswith("test_") and not f.endswith("_test.py"):
                continue
            seen: set[str] = set()
            todo = [f, ""]
            while todo:
                node = todo.pop()
                if node not in seen:
                    seen.add(node)
                    todo.extend(self.edges.get(node, ()))
            out[f] = sorted(seen - {""})
        return out

    def pytest_sessionfinish(self) -> None:
        self.out.write_text(json.dumps(self.deps(), indent=0))
