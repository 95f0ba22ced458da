"""`tools/vendor dropin`: run the cases on pristine and ours, then compare.

One forkserver process (``python`` of the install) runs every case on both
trees; the pristine tree is the pinned sdist, extracted to a scratch folder
outside any git repository. Ours is the install (``--tree`` unset) or a source
tree (a unit's tree of the series).
"""

from __future__ import annotations

import fnmatch
import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from vendorlib.errors import VendorError
from vendorlib.pin import Unit, load_series, pinned_tree
from vendorlib.proc import captured

from ..installed import installed_package
from ..pytest_run import TOOLS, tree_env
from ..unit_files import source_files
from .cases import Case, api_cases, cli_cases
from .compare import Comparison, compare, load_intended


@dataclass
class DropinRun:
    comparison: Comparison
    seconds: float
    cases: int


def pristine_tree(root: Path, scratch: Path, sdist: Path | None = None) -> Path:
    """The pinned release, extracted under ``scratch``: its folder (with `src/`)."""
    return pinned_tree(root, scratch, sdist)


def installed_src(python: str) -> Path:
    """The folder the install imports `speculators` from (its `src/`)."""
    package = installed_package(python, Path.cwd())
    if package is None:
        raise VendorError(f"{python}: speculators is not installed")
    return package.parent


def select_cases(
    srcs: list[Path], checkpoints: dict[str, Path], kinds: tuple[str, ...]
) -> list[Case]:
    """The api cases (using each labelled checkpoint) and/or the cli cases."""
    cases: list[Case] = []
    if "api" in kinds:
        cases += api_cases(srcs, [f"{k}={v}" for k, v in checkpoints.items()])
    if "cli" in kinds:
        cases += cli_cases()
    return cases


def run_cases(
    python: str,
    trees: dict[str, Path | None],
    cases: list[Case],
    jobs: int,
    discover: list[str] | None = None,
    only: dict[str, list[str]] | None = None,
) -> dict:
    """Every case on every tree, in one forkserver: {tree: {case: result}}.

    ``trees``: name -> a folder with `src/` (None: the install); ``pristine`` is
    run through upstream's entry point, every other tree through ours.
    """
    with tempfile.TemporaryDirectory(prefix="dropin-job-") as work:
        job, out = Path(work) / "job.json", Path(work) / "out.json"
        srcs = {name: tree and str(tree / "src") for name, tree in trees.items()}
        job.write_text(
            json.dumps(
                {
                    "trees": srcs,
                    "cases": [asdict(c) for c in cases],
                    "jobs": jobs,
                    "discover": discover,
                    "only": only,
                }
            )
        )
        env = tree_env(None, one_thread=True)
        env["PYTHONPATH"] = str(TOOLS)
        # Wide enough that rich neither folds a word nor cuts an option name.
        env["COLUMNS"] = "200"
        proc = captured(
            [python, "-m", "seriescheck.dropin.forkserver", job, out], cwd=work, env=env
        )
        if proc.returncode != 0 or not out.is_file():
            raise VendorError(
                f"drop-in forkserver failed (rc={proc.returncode}): "
                f"{proc.stderr[-2000:]}"
            )
        return json.loads(out.read_text())["results"]


def run_dropin(
    root: Path,
    python: str,
    tree: Path | None = None,
    units: list[str] | None = None,
    checkpoints: dict[str, Path] | None = None,
    kinds: tuple[str, ...] = ("api", "cli"),
    jobs: int = 2,
    sdist: Path | None = None,
    pristine: Path | None = None,
    select: str = "*",
) -> DropinRun:
    """Compare ``tree`` (or the install) with the pinned release.

    ``units``: those applied to ``tree`` (default: the whole series); only their
    stated differences apply. ``select``: a glob over case names (all by default).
    """
    started = time.monotonic()
    series = [u.name for u in load_series(root)]
    applied = series if units is None else units
    intended = load_intended(root / "upstream_patches", applied)
    with tempfile.TemporaryDirectory(prefix="dropin-pristine-") as scratch:
        base = pristine or pristine_tree(root, Path(scratch), sdist)
        ours_src = tree / "src" if tree is not None else installed_src(python)
        cases = select_cases([base / "src", ours_src], checkpoints or {}, kinds)
        cases = [c for c in cases if fnmatch.fnmatchcase(c.name, select)]
        results = run_cases(python, {"pristine": base, "ours": tree}, cases, jobs)
    comparison = compare(results["pristine"], results["ours"], intended)
    return DropinRun(comparison, time.monotonic() - started, len(cases))


def relevant_cases(unit: Unit, cases: list[Case]) -> list[str]:
    """The cases of ``cases`` a unit's tree runs in the series.

    Every command-line case, and ``api:speculators`` (its import reaches every
    model, registry and config); then each package whose folder holds a file
    the unit adds or changes, imported first (per name where it is lazy).
    """
    touched = {
        ".".join(Path(rel).parent.parts[1:])
        for rel in source_files(unit)
        if rel.startswith("src/speculators/")
    }
    return [
        c.name
        for c in cases
        if c.kind == "cli"
        or c.package == "speculators"
        or any(t == c.package or t.startswith(c.package + ".") for t in touched)
    ]


def run_series_dropin(
    root: Path,
    python: str,
    trees: list[tuple[str, Path]],
    pristine: Path,
    jobs: int = 2,
) -> dict[str, Comparison]:
    """Each unit's tree (pin + units up to it) against the pin, in one forkserver.

    Each tree runs the cases relevant to its last unit (`relevant_cases`) and is
    held to the differences its units state. The cases are those of the pin and
    the last tree (a package only some trees have is a case on every tree:
    absent on both sides, it is equal); the pin runs them all.
    """
    units = {u.name: u for u in load_series(root)}
    series = list(units)
    cases = select_cases([pristine / "src", trees[-1][1] / "src"], {}, ("api", "cli"))
    everything: dict[str, Path | None] = {"pristine": pristine, **dict(trees)}
    only = {name: relevant_cases(units[name], cases) for name, _ in trees}
    results = run_cases(
        python, everything, cases, jobs, discover=["pristine", trees[-1][0]], only=only
    )
    out = {}
    for unit, _ in trees:
        applied = series[: series.index(unit) + 1]
        intended = load_intended(root / "upstream_patches", applied)
        pristine_run = {c: results["pristine"][c] for c in only[unit]}
        out[unit] = compare(pristine_run, results[unit], intended)
    return out
