"""`speculators-kimi`: our command line (version, doctor, hidden states, demo)."""

from __future__ import annotations

import argparse
import sys

from . import PATCHES, UPSTREAM_NAME, UPSTREAM_VERSION, __version__


def version_text() -> str:
    units = "\n".join(f"  {u}" for u in PATCHES) or "  (none)"
    return (
        f"speculators-kimi {__version__}\n"
        f"upstream {UPSTREAM_NAME} {UPSTREAM_VERSION}\n"
        f"patch units ({len(PATCHES)}):\n{units}"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="speculators-kimi",
        description="Tools around the patched speculators distribution.",
    )
    parser.add_argument(
        "--version",
        action="store_true",
        help="print our version, the upstream pin and the applied patch units",
    )
    commands = parser.add_subparsers(dest="command")
    doctor_parser = commands.add_parser(
        "doctor",
        help="check a verifier checkpoint before training (reads no tensors)",
        description="Report the text config, the verifier weights training would "
        "load, the draft config and memory estimate, and every problem with its "
        "fix. Exits 1 when there is a problem.",
    )
    from .datagen import register_generate_hidden_states
    from .demo import register_demo
    from .doctor import add_arguments

    add_arguments(doctor_parser)
    register_generate_hidden_states(commands)
    register_demo(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        print(version_text())
        return 0
    if args.command == "doctor":
        from .doctor import run

        return run(args)
    if hasattr(args, "func"):
        return int(args.func(args))
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
