"""What the check in the scratch interpreter is asked (typed, JSON on the way in)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CheckRequest"]


@dataclass(frozen=True)
class CheckRequest:
    """The export to check, the draft and verifier it came from, and the step.

    :param synthetic_aux_states: feed both drafts aux states drawn at the
        verifier's width instead of running its decoder (a real-size verifier).
    :param num_speculative_tokens: an MLA export's speculative config's (``None``:
        3 for EAGLE-3, the block size for DSpark, as vLLM resolves it).
    """

    export: str
    checkpoint: str
    verifier: str
    tokens: int = 24
    synthetic_aux_states: bool = False
    num_speculative_tokens: int | None = None
