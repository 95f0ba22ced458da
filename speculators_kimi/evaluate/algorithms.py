"""Which drafts ``evaluate`` decodes, and the strategy that proposes for each.

EAGLE-3 chains one token per draft step (:class:`.draft.DraftRunner`); DFlash,
DFlash2 and DSpark propose a block per round (:class:`.block_draft.BlockDraftRunner`).
The others are refused before any tensor is loaded, with the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..errors import CommandError
from .block_draft import BlockDraftRunner, block_tokens
from .decode import Drafter
from .draft import DraftRunner

__all__ = [
    "BLOCK_ALGORITHMS",
    "DECODED",
    "UnsupportedDraftError",
    "check_decodable",
    "drafter_for",
]

#: The block drafters, decoded as vLLM 0.34 decodes them (anchor + mask block).
BLOCK_ALGORITHMS = ("dflash", "dflash2", "dspark")
DECODED = ("eagle3", *BLOCK_ALGORITHMS)

#: Why a draft of this algorithm is not decoded, and what to do instead.
_REFUSED = {
    "xpress": "vLLM 0.34 serves XPress only in its native full-vocabulary "
    "Qwen3XPress layout, not this speculators layout; train --speculator-type "
    "dflash or dspark for a block drafter vLLM serves from speculators",
    "peagle": "vLLM 0.34 does not serve it ('P-EAGLE (parallel drafting "
    "EAGLE-3) is not supported.'); train --speculator-type eagle3",
    "mtp": "an MTP draft is decoded by the verifier's own MTP layer in vLLM, "
    "not by a speculators draft",
}


class UnsupportedDraftError(CommandError):
    """The checkpoint is a draft ``evaluate`` does not decode."""


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
    if algorithm not in DECODED:
        why = _REFUSED.get(str(algorithm), "not a draft speculators trains")
        raise UnsupportedDraftError(
            f"{checkpoint}: a {algorithm!r} draft; evaluate decodes "
            f"{', '.join(DECODED)} drafts: {why}"
        )
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
