"""`tools/vendor test-series` and `tools/vendor dropin`: the parsers and commands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def cmd_test_series(args: argparse.Namespace) -> int:
    from .stepwise import run_series

    suite = None if args.no_suite else args.upstream_suite
    if suite is None and not args.no_suite:
        suite = args.root.parent / "shared" / "upstream-suite"
    return run_series(
        args.root,
        _python(args),
        suite,
        units_arg=args.units,
        json_out=Path(args.json) if args.json else None,
        sdist=args.sdist,
        keep=args.keep,
        jobs=args.jobs,
        skip_installed=args.skip_installed,
        dropin=args.dropin,
        all_tests=args.all_tests,
    )


def _python(args: argparse.Namespace) -> str:
    """``--python``, else the project's .venv interpreter, else this one."""
    python = args.python
    if python is None:
        venv = args.root / ".venv" / "bin" / "python"
        python = str(venv) if venv.is_file() else sys.executable
    return str(Path(python).absolute())


def cmd_dropin(args: argparse.Namespace) -> int:
    from .dropin.check import run_dropin
    from .dropin.compare import report

    run = run_dropin(
        args.root,
        _python(args),
        tree=args.tree,
        units=args.units.split(",") if args.units else None,
        checkpoints={
            label: Path(path)
            for label, _, path in (c.partition("=") for c in args.checkpoint)
        },
        kinds=tuple(args.kinds.split(",")),
        jobs=args.jobs,
        sdist=args.sdist,
        select=args.select,
    )
    print(report(run.comparison))
    print(f"{run.cases} cases on both trees in {run.seconds:.0f} s")
    return 0 if run.comparison.ok else 1


def add_test_commands(sub: argparse._SubParsersAction) -> None:
    """Commands that test the series against upstream's suite and API."""
    t = sub.add_parser(
        "test-series",
        help="per unit (pin + units up to it): upstream's suite and the units' tests",
    )
    t.add_argument(
        "--upstream-suite",
        type=Path,
        metavar="DIR",
        help="folder with snapshot/, baseline.txt (default ../shared/upstream-suite)",
    )
    t.add_argument("--no-suite", action="store_true", help="only the units' own tests")
    t.add_argument("--units", metavar="A,B", help="test only these (name or number)")
    t.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    t.add_argument(
        "--python",
        help="interpreter to test with (default: the project's .venv/bin/python, "
        "else the one running this)",
    )
    t.add_argument("--sdist", type=Path, help="the pinned sdist file (hash checked)")
    t.add_argument("--keep", action="store_true", help="keep the scratch trees")
    t.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="N pytest runs at a time; the next tree starts as one ends",
    )
    t.add_argument(
        "--skip-installed",
        action="store_true",
        help="skip the last tree when the installed speculators is exactly it",
    )
    t.add_argument(
        "--dropin",
        action="store_true",
        help="also compare each tree's API and commands with the pin's (dropin)",
    )
    t.add_argument(
        "--all-tests",
        action="store_true",
        help="each tree runs upstream's whole suite, not the tests its units reach",
    )
    t.set_defaults(func=cmd_test_series)

    d = sub.add_parser(
        "dropin",
        help="upstream's API and commands on the pinned release and ours, compared",
    )
    d.add_argument("--tree", type=Path, help="a source tree (default: the install)")
    d.add_argument(
        "--units", metavar="A,B", help="units applied to --tree (default: all)"
    )
    d.add_argument(
        "--checkpoint",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="a trained checkpoint both trees load (repeatable)",
    )
    d.add_argument("--kinds", default="api,cli", help="api, cli or both")
    d.add_argument("--select", default="*", help="a glob over case names")
    d.add_argument(
        "--python",
        help="interpreter (default: the project's .venv/bin/python, else the one "
        "running this)",
    )
    d.add_argument("--jobs", type=int, default=2, metavar="N", help="cases at a time")
    d.add_argument("--sdist", type=Path, help="the pinned sdist file (hash checked)")
    d.set_defaults(func=cmd_dropin)
