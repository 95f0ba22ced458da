"""Which drafts ``evaluate`` decodes, and the strategy that proposes for each.

EAGLE-3 chains one token per draft step (:class:`.draft.DraftRunner`); DFlash,
DFlash2 and DSpark propose a block per round (:class:`.block_draft.BlockDraftRunner`).
The others (:mod:`speculators_kimi.served`) are refused before any tensor is
loaded, with the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..errors import CommandError
from ..served import (
    BLOCK_ALGORITHMS,
    SERVED,
    unserved_reason,
    xpress_unserved_reason,
)
from .block_draft import BlockDraftRunner, block_tokens
from .decode import Drafter
from .draft import DraftRunner

__all__ = [
    "UnsupportedDraftError",
    "check_decodable",
    "drafter_for",
]


class UnsupportedDraftError(CommandError):
    """The checkpoint is a draft ``evaluate`` does not decode."""


def _check_xpress(
    checkpoint: str | Path, config: dict[str, Any], k: int | None
) -> None:
    """What vLLM's XPress serves (:func:`..served.xpress_unserved_reason`),
    and the whole block each step (its refiner is sized for the block)."""
    why = xpress_unserved_reason(config)
    if why is not None:
        raise UnsupportedDraftError(f"{checkpoint}: {why}")
    block = int(config.get("block_size") or 0)
    if k is not None and block and k != block - 1:
        raise CommandError(
            f"--num-speculative-tokens {k}: vLLM drafts {checkpoint}'s XPress "
            f"draft a whole block at a time (block_size {block}, the refiner's "
            f"mixer is that size); pass -k {block - 1}"
        )


def check_decodable(
    checkpoint: str | Path,
    config: dict[str, Any],
    num_speculative_tokens: int | None = None,
) -> None:
    """Refuse, from its ``config.json`` (``config``), a draft that is not
    decoded here, or a block drafter asked for more tokens than one block holds.

    :raises UnsupportedDraftError: naming the algorithm and why.
    :raises CommandError: ``num_speculative_tokens`` past the block (the flag and
        the most it may be named).
    """
    algorithm = config.get("speculators_model_type")
    why = unserved_reason(algorithm)
    if why is not None:
        raise UnsupportedDraftError(
            f"{checkpoint}: a {algorithm!r} draft; evaluate decodes the drafts "
            f"vLLM serves ({', '.join(SERVED)}): {why}"
        )
    if algorithm == "xpress":
        _check_xpress(checkpoint, config, num_speculative_tokens)
    anchor = config.get("sample_from_anchor")  # written with every block config
    if (
        algorithm in BLOCK_ALGORITHMS
        and num_speculative_tokens is not None
        and anchor is not None
    ):
        block_size = int(config["block_size"])
        most = block_tokens(block_size, bool(anchor))
        if num_speculative_tokens > most:
            raise CommandError(
                f"--num-speculative-tokens {num_speculative_tokens}: {checkpoint}'s "
                f"{algorithm} draft proposes at most {most} tokens per block "
                f"(block_size {block_size}, sample_from_anchor {anchor}); pass "
                f"-k {most} or fewer"
            )


def drafter_for(draft: Any, device: torch.device | str) -> Drafter:
    """The strategy that proposes for ``draft`` in the decode loop."""
    if draft.config.speculators_model_type in BLOCK_ALGORITHMS:
        return BlockDraftRunner(draft, device)
    return DraftRunner(draft, device)
