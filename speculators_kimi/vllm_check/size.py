"""Whether the verifier's decoder fits this machine, asked before anything is built.

Without ``--synthetic-aux-states`` the check computes the prompt's real aux states
with the verifier's decoder and head in float32 on CPU (as ``evaluate`` does). A
real Kimi-K2.5 needs terabytes for that; rather than die inside an allocation,
the check estimates the need from the checkpoint's safetensors headers (no tensor
read) and refuses in one line that names the flag.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..errors import CommandError

__all__ = ["DecoderSize", "DecoderTooLargeError", "check_decoder_fits", "decoder_size"]

#: float32: what the check computes the aux states in.
BYTES_PER_ELEMENT = 4


class DecoderTooLargeError(CommandError):
    """The verifier's decoder does not fit this machine's available memory."""


@dataclass(frozen=True)
class DecoderSize:
    """The decoder's and head's size as the check would hold them."""

    elements: int
    bytes: int


def decoder_size(verifier: str | Path) -> DecoderSize:
    """Elements of every tensor under the verifier's decoder prefix, and of its
    head, and their float32 bytes (from the headers; no tensor read)."""
    from speculators.utils.verifier_weights import resolve_verifier_weights
    from speculators.utils.verifier_weights.files import (
        TensorHeaders,
        read_weight_index,
    )

    spec = resolve_verifier_weights(str(verifier))
    weight_map = read_weight_index(str(verifier))
    headers = TensorHeaders(str(verifier), weight_map, None)
    prefix = f"{spec.prefix}." if spec.prefix else ""
    keys = {k for k in weight_map if k.startswith(prefix)} | {spec.head.key}
    elements = sum(math.prod(headers.info(k).shape) for k in keys)
    return DecoderSize(elements, elements * BYTES_PER_ELEMENT)


def available_bytes() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` (None where there is none)."""
    meminfo = Path("/proc/meminfo")
    if not meminfo.is_file():
        return None
    for line in meminfo.read_text().splitlines():
        key, _, value = line.partition(":")
        if key == "MemAvailable":
            return int(value.split()[0]) * 1024
    return None


def _gib(n: int) -> str:
    return f"{n / 2**30:,.1f} GiB"


def check_decoder_fits(verifier: str | Path, available: int | None = None) -> None:
    """Refuse, naming ``--synthetic-aux-states``, a verifier whose decoder and head
    in float32 need more than the memory available (``available``: default
    this machine's ``MemAvailable``).

    :raises DecoderTooLargeError: it does not fit.
    """
    available = available_bytes() if available is None else available
    if available is None:
        return
    size = decoder_size(verifier)
    if size.bytes > available:
        raise DecoderTooLargeError(
            f"--verifier {verifier}: computing real aux states needs its decoder "
            f"and head in float32, about {_gib(size.bytes)} "
            f"({size.elements:,} parameters), and {_gib(available)} is available; "
            "rerun with --synthetic-aux-states (checks the export's parsing, "
            "loading and the draft's own step, not the verifier's capture)"
        )
