"""`speculators-kimi`: our command line (version, doctor, hidden states, evaluate,
export, demo).

Each subcommand lives in its own module, which provides ``add_arguments(parser)``
and ``run(args) -> int``; a module (and torch with it) is imported only when its
command is the one asked for, so ``--version`` and ``--help`` stay fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from . import PATCHES, UPSTREAM_NAME, UPSTREAM_VERSION, __version__

if TYPE_CHECKING:
    from .datagen.verifier import Placement

#: name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "doctor": (
        "speculators_kimi.doctor",
        "check a verifier checkpoint before training (reads no tensors unless "
        "--check-values)",
    ),
    "generate-hidden-states": (
        "speculators_kimi.datagen.cli",
        "compute hidden states for the offline trainer with transformers",
    ),
    "evaluate": (
        "speculators_kimi.evaluate.cli",
        "acceptance length of a trained EAGLE-3 draft (speculative decoding with "
        "transformers, CPU or one GPU)",
    ),
    "export": (
        "speculators_kimi.export",
        "write a trained EAGLE-3 checkpoint as a directory vLLM serves as is",
    ),
    "demo": (
        "speculators_kimi.demo",
        "train an EAGLE-3 draft on a tiny Kimi-K2.5-shaped verifier (CPU ok)",
    ),
}


#: The verifier-weight overrides of ``speculators train``, by flag: the same
#: spelling and meaning in every command that resolves a verifier's weights.
VERIFIER_WEIGHT_FLAGS: dict[str, tuple[str, str]] = {
    "prefix": (
        "--verifier-weight-prefix",
        "decoder prefix of the verifier's text model in its weight map (e.g. "
        "'language_model.model'), as for `speculators train` (default: found "
        "from the checkpoint)",
    ),
    "embed_key": (
        "--verifier-embed-key",
        "exact weight-map key of the verifier's input embedding",
    ),
    "head_key": (
        "--verifier-head-key",
        "exact weight-map key of the verifier's output head",
    ),
    "norm_key": (
        "--verifier-norm-key",
        "exact weight-map key of the verifier's final norm weight",
    ),
}


def add_verifier_weight_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--verifier-*`` weight overrides, as ``speculators train`` has them."""
    for flag, help_text in VERIFIER_WEIGHT_FLAGS.values():
        parser.add_argument(flag, default=None, help=help_text)


def verifier_weight_kwargs(args: argparse.Namespace) -> dict[str, str | None]:
    """The overrides given, as ``resolve_verifier_weights`` keyword arguments."""
    return {
        name: getattr(args, flag[2:].replace("-", "_"))
        for name, (flag, _) in VERIFIER_WEIGHT_FLAGS.items()
    }


def add_placement_arguments(parser: argparse.ArgumentParser) -> None:
    """``--device-map`` / ``--max-memory`` / ``--offload-folder``: a verifier
    bigger than one device, through accelerate's big-model dispatch."""
    parser.add_argument(
        "--device-map",
        default=None,
        help="spread the verifier over devices with accelerate: auto (GPUs, then "
        "CPU, then disk), balanced or sequential; overrides --device",
    )
    parser.add_argument(
        "--max-memory",
        default=None,
        help="with --device-map: the most each device may hold, e.g. "
        "'0=70GiB,1=70GiB,cpu=200GiB'; the rest is offloaded to disk",
    )
    parser.add_argument(
        "--offload-folder",
        default=None,
        help="with --device-map: where disk-offloaded weights go (default: a "
        "temporary directory)",
    )


def placement_from_args(args: argparse.Namespace) -> Placement | None:
    """The :class:`~speculators_kimi.datagen.verifier.Placement` asked for, or None."""
    from .datagen.verifier import Placement, parse_max_memory

    if args.device_map is None:
        if args.max_memory or args.offload_folder:
            raise ValueError("--max-memory and --offload-folder need --device-map")
        return None
    return Placement(
        device_map=args.device_map,
        max_memory=parse_max_memory(args.max_memory) if args.max_memory else None,
        offload_folder=args.offload_folder,
    )


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


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    selected = next((a for a in argv if a in COMMANDS), None)
    parser = build_parser(selected)
    args = parser.parse_args(argv)
    if args.version:
        print(version_text())
        return 0
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    # Known errors (bad verifier path, config, weights) as one line, as upstream's
    # commands report them (unit 0012); imported here to keep --version fast.
    from speculators.utils.cli_errors import run_cli

    return int(run_cli(lambda: args.func(args)))


def command_main(name: str, argv: Sequence[str] | None = None) -> int:
    """``python -m <module>`` of a subcommand: ``speculators-kimi NAME ...``."""
    return main([name, *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
