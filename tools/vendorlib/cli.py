"""`tools/vendor`: materialize, check, export, rebase, status, pr, test-series,
dropin."""

# test-series and dropin are `seriescheck.cli`'s, added by `tools/vendor` (`extra`).

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from .build import materialize, vendored_dir
from .errors import VendorError
from .gitwork import export, materialize_git
from .lint import FAIL, MISSING, lint, unit_py_files
from .pin import Unit, load_pin, load_series, patches_dir, pinned_tree

ROOT = Path(__file__).resolve().parents[2]


def cmd_materialize(args: argparse.Namespace) -> int:
    root: Path = args.root
    if args.git:
        dest = Path(args.git)
        if dest.exists() and any(dest.iterdir()):
            raise VendorError(
                f"{dest}: exists and is not empty; choose a new directory"
            )
        pinned_tree(root, dest, args.sdist)
        materialize_git(root, dest)
        print(
            f"git work tree at {dest}: upstream + {len(load_series(root))} unit commits"
        )
        print(f"edit, commit into the unit's commit, then: tools/vendor export {dest}")
        return 0
    dest = Path(args.dest) if args.dest else vendored_dir(root)
    materialize(root, dest, args.sdist)
    print(f"materialized tree at {dest}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    names = export(args.root, Path(args.dir))
    print(
        f"exported {len(names)} units to {patches_dir(args.root)}: {', '.join(names)}"
    )
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    root: Path = args.root
    pin = load_pin(root)
    units = load_series(root)
    problems: list[str] = []
    listed = {u.name for u in units}
    for path in sorted(patches_dir(root).iterdir()):
        if path.suffix == ".patch" and path.stem not in listed:
            problems.append(f"{path.name}: a unit file not listed in series")
        elif path.is_dir():
            problems.append(f"{path.name}/: not a unit (a unit is one NAME.patch)")
    with tempfile.TemporaryDirectory() as tmp:
        tree = pinned_tree(root, Path(tmp) / "tree", args.sdist)
        print(f"upstream {pin.name} {pin.version}: sha256 ok")

        def applied(unit: Unit, touched: list[str]) -> None:
            problems.extend(f"{unit.name}: {p}" for p in unit.pr_text_problems())
            print(f"  {unit.name}: applies ({len(touched)} files)")

        materialize_git(root, tree, units, applied)
        pristine = pinned_tree(root, Path(tmp) / "pristine", args.sdist)
        for result in lint(tree, unit_py_files(units), pristine, mypy=not args.no_mypy):
            print(f"  upstream lint, {result.tool}: {result.status}")
            if result.status == FAIL:
                problems.append(
                    f"upstream's {result.tool} (its pyproject.toml settings) on the "
                    f"units' files:\n{result.output.rstrip()}"
                )
            elif result.status == MISSING:
                print(f"  {result.output}", file=sys.stderr)
        print(f"  git am of the series (materialize --git): {len(units)} commits")
    for p in problems:
        print(f"problem: {p}", file=sys.stderr)
    return 1 if problems else 0


def cmd_rebase(args: argparse.Namespace) -> int:
    from .rebase import rebase

    return rebase(
        args.root,
        args.to,
        sdist=args.sdist,
        sha256=args.sha256,
        work=Path(args.work) if args.work else None,
        run_tests=not args.no_tests,
    )


def cmd_pr(args: argparse.Namespace) -> int:
    from .pr import build_bundle

    return build_bundle(
        args.root,
        args.unit,
        out=Path(args.out) if args.out else None,
        upstream_git=Path(args.upstream_git) if args.upstream_git else None,
        sdist=args.sdist,
        mypy=not args.no_mypy,
    )


def cmd_status(args: argparse.Namespace) -> int:
    from .status import status

    return status(
        args.root, Path(args.upstream_git) if args.upstream_git else None, args.sdist
    )


#: Adds subcommands to `tools/vendor`'s parser (as `seriescheck.cli` does its own).
AddCommands = Callable[[argparse._SubParsersAction], None]


def build_parser(extra: Sequence[AddCommands] = ()) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tools/vendor", description=__doc__)
    parser.add_argument("--root", type=Path, default=ROOT, help="project root")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_series_commands(sub)
    for add in extra:
        add(sub)
    return parser


def _add_series_commands(sub: argparse._SubParsersAction) -> None:
    """Commands that build, move or ship the series of units."""
    m = sub.add_parser("materialize", help="upstream + units as a tree or git history")
    m.add_argument("dest", nargs="?", help="target directory (default: .vendored)")
    m.add_argument("--git", metavar="DIR", help="a git work tree, one commit per unit")
    m.add_argument(
        "--sdist", type=Path, help="use this sdist file (hash still checked)"
    )
    m.set_defaults(func=cmd_materialize)

    e = sub.add_parser("export", help="rewrite upstream_patches/ from a git work tree")
    e.add_argument("dir", help="the work tree made by `materialize --git`")
    e.set_defaults(func=cmd_export)

    c = sub.add_parser("check", help="prove the series applies (git am) and lints")
    c.add_argument(
        "--sdist", type=Path, help="use this sdist file (hash still checked)"
    )
    c.add_argument(
        "--no-mypy",
        action="store_true",
        help="lint with ruff only (mypy takes ~40-55 s)",
    )
    c.set_defaults(func=cmd_check)

    r = sub.add_parser("rebase", help="move the pin to a new release, replaying units")
    r.add_argument("--to", required=True, metavar="VERSION", help="the new release")
    r.add_argument("--sdist", type=Path, help="the new release's sdist file")
    r.add_argument("--sha256", help="its expected sha256 (refused on mismatch)")
    r.add_argument("--work", help="work tree (default build/rebase-VERSION)")
    r.add_argument("--no-tests", action="store_true", help="skip pytest tests/unit")
    r.set_defaults(func=cmd_rebase)

    p = sub.add_parser("pr", help="an upstream-ready PR bundle for one unit")
    p.add_argument("unit", help="unit name (a line of series)")
    p.add_argument("--upstream-git", metavar="DIR", help="base on this clone's HEAD")
    p.add_argument("--out", metavar="DIR", help="bundle folder (build/pr/UNIT)")
    p.add_argument("--sdist", type=Path, help="the pinned sdist file (hash checked)")
    p.add_argument("--no-mypy", action="store_true", help="skip mypy in LINT.txt")
    p.set_defaults(func=cmd_pr)

    st = sub.add_parser("status", help="per unit: size, applies to pin / upstream tip")
    st.add_argument(
        "--upstream-git", metavar="DIR", help="also check this clone's HEAD"
    )
    st.add_argument("--sdist", type=Path, help="the pinned sdist file (hash checked)")
    st.set_defaults(func=cmd_status)


def main(argv: list[str] | None = None, extra: Sequence[AddCommands] = ()) -> int:
    args = build_parser(extra).parse_args(argv)
    try:
        return int(args.func(args))
    except VendorError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
