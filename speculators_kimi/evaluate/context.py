"""Acceptance by context length, and the lengths a draft is known to handle.

A draft trained on short sequences can collapse past them, while serving runs
long contexts; so acceptance is reported per bucket of the context length at
which each verification step happens, and evaluation warns, before decoding,
when it will reach positions past the training length or past the draft's own
position limit. The training length is the longest position training showed the
draft: upstream's trainer restarts positions at every row of the prepared data
(`train/data.py`), so it is the data's longest row, capped by ``total_seq_len``
(both from the ``run.yaml`` that ``speculators train`` writes beside its
checkpoints), not ``total_seq_len`` alone.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .profile import DECIMALS, RequestRecord
from .run_record import data_arg, run_config

__all__ = [
    "DraftLengths",
    "acceptance_by_context",
    "bucket_edges",
    "draft_lengths",
    "length_warnings",
]

#: The first bucket's upper edge; each next bucket is twice as long.
FIRST_EDGE = 64


@dataclass(frozen=True)
class DraftLengths:
    """What a draft checkpoint says about the lengths it handles (None: unknown)."""

    trained: int | None  # the longest position its training showed it
    trained_source: Path | None  # the run.yaml it was read from
    position_limit: int | None  # its layers' max_position_embeddings
    trained_from: str = "total_seq_len"  # what ``trained`` is, in words


def _longest_row(run_yaml: Path, data_path: str | None) -> tuple[int, Path] | None:
    """The prepared data's longest row (its ``seq_len`` column) and where the data
    is; None when it is not found there (moved, or no ``seq_len`` column)."""
    if not data_path:
        return None
    path = Path(data_path)
    for where in (
        [path] if path.is_absolute() else [Path.cwd() / path, run_yaml.parent / path]
    ):
        if (where / "dataset_info.json").is_file():
            from datasets import load_from_disk

            rows = load_from_disk(str(where))
            if "seq_len" in rows.column_names and len(rows):
                return int(max(rows.with_format(None)["seq_len"])), where
    return None


def _trained_length(checkpoint: Path) -> tuple[int | None, Path | None, str]:
    found = run_config(checkpoint)
    if found is None:
        return None, None, "total_seq_len"
    train, run_yaml = found
    total = int(data_arg(train, "total_seq_len"))
    longest = _longest_row(run_yaml, (train.get("data") or {}).get("data_path"))
    if longest is not None and longest[0] < total:
        why = (
            f"the longest row of its data {longest[1]}; positions restart "
            f"at every row, whatever total_seq_len ({total})"
        )
        return longest[0], run_yaml, why
    return total, run_yaml, "total_seq_len"


def draft_lengths(checkpoint: str | Path) -> DraftLengths:
    """The training length and position limit of the draft at ``checkpoint``."""
    checkpoint = Path(checkpoint).resolve()
    trained, source, why = _trained_length(checkpoint)
    config = json.loads((checkpoint / "config.json").read_text())
    layer = config.get("transformer_layer_config") or {}
    limit = layer.get("max_position_embeddings")
    return DraftLengths(trained, source, int(limit) if limit else None, why)


def length_warnings(
    prompt_lengths: Sequence[int], max_new_tokens: int, lengths: DraftLengths
) -> list[str]:
    """What to warn about before decoding: the longest sequence evaluation
    reaches (longest prompt + ``max_new_tokens``) past the training length or
    the draft's position limit, each named."""
    if not prompt_lengths:
        return []
    longest = max(prompt_lengths)
    reach = longest + max_new_tokens
    where = (
        f"prompts of up to {longest} tokens with up to {max_new_tokens} new ones "
        f"reach position {reach}"
    )
    found = []
    if lengths.trained is not None and reach > lengths.trained:
        found.append(
            f"{where}, past the {lengths.trained} tokens the draft was trained on "
            f"({lengths.trained_from} in {lengths.trained_source}): expect "
            "acceptance to drop there; see the per-bucket figures"
        )
    if lengths.position_limit is not None and reach > lengths.position_limit:
        found.append(
            f"{where}, past the draft's position limit (max_position_embeddings "
            f"{lengths.position_limit})"
        )
    return found


def bucket_edges(longest: int, first: int = FIRST_EDGE) -> list[int]:
    """``0, first, 2 * first, ...``: the last edge above ``longest``."""
    edges = [0, first]
    while edges[-1] <= longest:
        edges.append(edges[-1] * 2)
    return edges


def acceptance_by_context(
    records: Sequence[RequestRecord], edges: Sequence[int] | None = None
) -> list[dict[str, Any]]:
    """Mean acceptance length of the steps whose context length falls in each
    ``[edges[i], edges[i + 1])`` (empty buckets left out)."""
    steps = [
        (length, m)
        for record in records
        for length, m in zip(
            record.context_length_per_step, record.accepted_per_step, strict=True
        )
    ]
    if not steps:
        return []
    edges = list(edges) if edges else bucket_edges(max(n for n, _ in steps))
    buckets = []
    for lo, hi in zip(edges, edges[1:], strict=False):
        accepted = [m for n, m in steps if lo <= n < hi]
        if accepted:
            buckets.append(
                {
                    "context_from": lo,
                    "context_to": hi,
                    "num_drafts": len(accepted),
                    "mean_acceptance_length": round(
                        1 + sum(accepted) / len(accepted), DECIMALS
                    ),
                }
            )
    return buckets
