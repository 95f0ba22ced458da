"""`speculators-kimi`: our command line (version, doctor, hidden states, evaluate,
export, vllm-check, demo).

Each subcommand lives in its own module, which provides ``add_arguments(parser)``
and ``run(args) -> int`` (the argument groups they share are in :mod:`.cli_args`);
a module (and torch with it) is imported only when its command is the one asked
for, so ``--version`` and ``--help`` stay fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from . import PATCHES, UPSTREAM_NAME, UPSTREAM_VERSION, __version__
from .errors import CommandError
from .pipes import quiet_when_reader_closes

#: name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "doctor": (
        "speculators_kimi.doctor.cli",
        "check a verifier checkpoint before training (reads no tensors unless "
        "--check-values)",
    ),
    "generate-hidden-states": (
        "speculators_kimi.datagen.cli",
        "compute hidden states for the offline trainer with transformers",
    ),
    "evaluate": (
        "speculators_kimi.evaluate.cli",
        "acceptance length of a trained EAGLE-3 or block (DFlash, DFlash2, DSpark, "
        "XPress) draft (speculative decoding with transformers, CPU or one GPU)",
    ),
    "export": (
        "speculators_kimi.export.cli",
        "write a trained EAGLE-3, DFlash, DFlash2, DSpark or XPress checkpoint as a "
        "directory vLLM serves as is",
    ),
    "vllm-check": (
        "speculators_kimi.vllm_check.cli",
        "check an export with vLLM's own code on CPU (vLLM's wheel in a scratch "
        "environment built on first use)",
    ),
    "demo": (
        "speculators_kimi.demo.cli",
        "train an EAGLE-3 draft on a tiny Kimi-K2.5-shaped verifier (CPU ok)",
    ),
}


def version_text() -> str:
    units = "\n".join(f"  {u}" for u in PATCHES) or "  (none)"
    return (
        f"speculators-kimi {__version__}\n"
        f"upstream {UPSTREAM_NAME} {UPSTREAM_VERSION}\n"
        f"patch units ({len(PATCHES)}):\n{units}"
    )


def build_parser(selected: str | None = None) -> argparse.ArgumentParser:
    """The parser; only the ``selected`` subcommand's module is imported."""
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
    for name, (module_name, help_text) in COMMANDS.items():
        sub = commands.add_parser(name, help=help_text, description=help_text)
        if name == selected:
            module = importlib.import_module(module_name)
            module.add_arguments(sub)
            sub.set_defaults(func=module.run)
    return parser


class _Stdout(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler on whatever ``sys.stdout`` is when a record is written (a test's
    capture, or the terminal), not on the one of when it was made; on
    ``sys.stderr`` while ``to_stderr`` (stdout holds a ``--json`` report)."""

    to_stderr = False

    @property  # type: ignore[override]
    def stream(self):  # type: ignore[no-untyped-def]
        return sys.stderr if self.to_stderr else sys.stdout

    @stream.setter
    def stream(self, _value) -> None:  # type: ignore[no-untyped-def]
        pass

    def handleError(self, record: logging.LogRecord) -> None:
        """A closed reader ends the command (:mod:`.pipes`), as a failed print
        does, instead of a "Logging error" traceback on every later record."""
        error = sys.exc_info()[1]
        if isinstance(error, BrokenPipeError):
            raise error
        super().handleError(record)


class _ShortName(logging.Filter):
    """``[demo]`` for ``speculators_kimi.demo``: the module, not the package."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.short_name = record.name.rpartition(".")[2]
        return True


def configure_logging(*, to_stderr: bool = False) -> None:
    """Our loggers' lines on stdout as ``[<module>] message`` (INFO and up), or
    on stderr (``to_stderr``: the command prints its JSON report on stdout).

    The library itself only logs (``logging.getLogger(__name__)``, silent until
    its user configures logging); a command configures this once, for the
    ``speculators_kimi`` loggers alone, so other libraries stay as they are.
    """
    package = logging.getLogger("speculators_kimi")
    for existing in package.handlers:
        if isinstance(existing, _Stdout):
            existing.to_stderr = to_stderr
            return
    handler = _Stdout()
    handler.to_stderr = to_stderr
    handler.setFormatter(logging.Formatter("[%(short_name)s] %(message)s"))
    handler.addFilter(_ShortName())
    package.addHandler(handler)
    package.setLevel(logging.INFO)
    package.propagate = False


#: What a shell reports for a command that Ctrl-C (SIGINT) ended (128 + 2).
INTERRUPTED = 130


@quiet_when_reader_closes
def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    selected = next((a for a in argv if a in COMMANDS), None)
    parser = build_parser(selected)
    # What follows `--` is another command's flags: doctor's are `speculators
    # train`'s, read by train's own parser (a command without train_flags
    # takes none).
    tail: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, tail = argv[:at], argv[at + 1 :]
    args = parser.parse_args(argv)
    if tail:
        if not hasattr(args, "train_flags"):
            parser.error(f"{args.command} takes no arguments after --")
        args.train_flags = tuple(tail)
    if args.version:
        print(version_text())
        return 0
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    configure_logging(to_stderr=getattr(args, "json", None) == "-")
    # Known errors (bad verifier path, config, weights) as one line, as upstream's
    # commands report them (unit 0012); imported here to keep --version fast.
    from speculators.utils.cli_errors import run_cli

    return int(run_cli(lambda: _run_command(args)))


def _run_command(args: argparse.Namespace) -> int:
    """The subcommand, its :class:`~.errors.CommandError` reported as
    ``run_cli`` reports upstream's known errors (one line, exit 1)."""
    from speculators.utils.cli_errors import TRACEBACK_ENV

    try:
        return int(args.func(args))
    except CommandError as err:
        if os.environ.get(TRACEBACK_ENV, "0") not in {"", "0"}:
            raise
        print(f"error: {err}", file=sys.stderr)
        print(f"(set {TRACEBACK_ENV}=1 to see the traceback)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # Ctrl-C is the user's choice, not a fault: no traceback. Whatever the
        # command had finished is kept (written whole, or not at all).
        if os.environ.get(TRACEBACK_ENV, "0") not in {"", "0"}:
            raise
        print(f"\ninterrupted: {args.command} stopped", file=sys.stderr)
        return INTERRUPTED


def command_main(name: str, argv: Sequence[str] | None = None) -> int:
    """``python -m <module>`` of a subcommand: ``speculators-kimi NAME ...``."""
    return main([name, *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
