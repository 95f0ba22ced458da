"""What to compute: aux layer ids, batches by length, the context-window check.

Batches depend only on the dataset's lengths (never on what is already on disk),
so a resumed run recomputes the same batches and writes the same bytes.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

from ..errors import CommandError

__all__ = [
    "ContextLengthError",
    "check_context",
    "default_target_layer_ids",
    "plan_batches",
]


class ContextLengthError(CommandError):
    """A sample is longer than the verifier's context window."""


def default_target_layer_ids(
    verifier: str | Path,
    target_layer_ids: Sequence[int] | None = None,
    *,
    trust_remote_code: bool = False,
) -> list[int]:
    """Aux layer ids exactly as upstream's trainer resolves them for ``verifier``."""
    from speculators.models.utils import resolve_target_layer_ids

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(
            resolve_target_layer_ids(
                list(target_layer_ids) if target_layer_ids is not None else None,
                str(verifier),
                trust_remote_code=trust_remote_code,
            )
        )


def plan_batches(
    lengths: Sequence[int], *, batch_size: int, max_batch_tokens: int
) -> list[list[int]]:
    """Sample indices grouped by length (longest first); depends only on ``lengths``."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    for idx in order:
        # Sorted longest first: the batch's padded length is its first sample's.
        width = lengths[current[0]] if current else lengths[idx]
        if current and (
            len(current) >= batch_size or width * (len(current) + 1) > max_batch_tokens
        ):
            batches.append(current)
            current = []
        current.append(idx)
    if current:
        batches.append(current)
    return batches


def check_context(lengths: Sequence[int], limit: int | None) -> None:
    """Fail before any work when a sample does not fit the verifier's context.

    :raises ContextLengthError: naming the first sample that is too long.
    """
    if not limit:
        return
    for idx, n in enumerate(lengths):
        if n > limit:
            raise ContextLengthError(
                f"sample {idx} has {n} tokens, more than the verifier's context "
                f"(max_position_embeddings={limit}); re-run prepare-data with "
                f"--seq-length {limit} or less"
            )
