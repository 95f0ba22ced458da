"""The argument groups several subcommands share, and their one report output.

Each function adds one group of flags with one spelling and meaning in every
command (the ``--verifier-*`` weight overrides as ``speculators train`` has them,
accelerate's placement flags, ``--json``) or turns the parsed flags into what the
library takes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .verifier.loading import Placement

__all__ = [
    "VERIFIER_WEIGHT_FLAGS",
    "add_json_argument",
    "add_placement_arguments",
    "add_verifier_weight_arguments",
    "emit_report",
    "non_negative_float",
    "placement_from_args",
    "placement_of",
    "positive_int",
    "verifier_weight_kwargs",
    "writable_report_path",
]

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
    """Where the verifier runs: ``--device``, or ``--device-map`` /
    ``--max-memory`` / ``--offload-folder`` for a verifier bigger than one
    device, through accelerate's big-model dispatch."""
    parser.add_argument(
        "--device", default="auto", type=device_name, help="cpu, cuda, cuda:N or auto"
    )
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
    """The :class:`~speculators_kimi.verifier.loading.Placement` asked for, or None."""
    return placement_of(args.device_map, args.max_memory, args.offload_folder)


def placement_of(
    device_map: str | None, max_memory: str | None, offload_folder: str | None
) -> Placement | None:
    """The placement of these ``--device-map``, ``--max-memory`` and
    ``--offload-folder`` values, or None.

    :raises CommandError: ``--max-memory`` or ``--offload-folder`` without
        ``--device-map``.
    """
    from .errors import CommandError
    from .verifier.loading import Placement, parse_max_memory

    if device_map is None:
        if max_memory or offload_folder:
            raise CommandError("--max-memory and --offload-folder need --device-map")
        return None
    return Placement(
        device_map=device_map,
        max_memory=parse_max_memory(max_memory) if max_memory else None,
        offload_folder=offload_folder,
    )


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    """``--json [PATH]``: the report as JSON, on stdout (no PATH) or in PATH."""
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        default=None,
        type=writable_report_path,
        metavar="PATH",
        help="the report as JSON: printed instead of the text (no PATH), or also "
        "written to PATH",
    )


def save_json_report(
    report: dict[str, Any], path: Path | str | None, *, show: bool = True
) -> str:
    """The one ending of every JSON report (commands, benchmarks, checks): the
    report as indented JSON (values JSON cannot hold, such as paths, as strings),
    printed when ``show``, and written to ``path`` (its folder made) when given.
    Returns the text."""
    as_json = json.dumps(report, indent=2, default=str) + "\n"
    if show:
        sys.stdout.write(as_json)
    if path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(as_json)
    return as_json


def positive_int(text: str) -> int:
    """An ``argparse`` type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def device_name(text: str) -> str:
    """An ``argparse`` type: ``auto``, or a device this machine has (``cuda``
    without one failed in torch's ``AssertionError`` once the model loaded)."""
    if text == "auto":
        return text
    import torch

    try:
        device = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(
            f"{text} is not a device (cpu, cuda, cuda:N or auto)"
        ) from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (device.index or 0) >= count:
            raise argparse.ArgumentTypeError(
                f"{text}: this machine has {count} CUDA device(s); use "
                + ("auto or cpu" if count == 0 else f"cuda:0 to cuda:{count - 1}")
            )
    return text


def non_negative_float(text: str) -> float:
    """An ``argparse`` type: a number of at least 0."""
    value = float(text)
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"{text} is not a number >= 0")
    return value


def writable_report_path(text: str) -> str:
    """An ``argparse`` type for a report's file: refused before the work that
    fills it when it names a directory (``-`` is standard output)."""
    if text != "-" and Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory; name a file")
    return text


def emit_report(report: dict[str, Any], text: str, args: argparse.Namespace) -> None:
    """Print ``text`` (or ``report`` as JSON) and write the JSON where ``--json``
    says."""
    if args.json == "-":
        save_json_report(report, None)
        return
    print(text)
    save_json_report(report, args.json, show=False)
