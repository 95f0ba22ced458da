"""Conversations that preprocessing drops, and the one report that says why.

A conversation whose chat template raises, or whose renders cannot be split into
context and reply (``BoundaryUnstableError``), is dropped so one bad row does
not end the run. ``datasets.map`` runs the batches in worker processes, each
with its own batch-relative indices, so a dropped conversation travels as an
empty row carrying its reason and its position in the input data; after the map
:func:`remove_dropped` removes those rows and logs one summary per reason, with
positions a user can find in the input file (they survive shuffling).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import TYPE_CHECKING

import torch

from speculators.data_generation.input_files import NoSamplesError

if TYPE_CHECKING:
    from datasets import Dataset as HFDataset

__all__ = [
    "DROPPED_COLUMN",
    "DROPPED_INDEX_COLUMN",
    "MAX_REPORTED_INDICES",
    "SOURCE_INDEX_COLUMN",
    "append_dropped",
    "pad_dropped",
    "remove_dropped",
    "with_source_index",
]

logger = logging.getLogger(__name__)

#: Column of the preprocessing output naming why a conversation was dropped.
DROPPED_COLUMN = "dropped_reason"
#: Column holding a dropped conversation's position in its input data.
DROPPED_INDEX_COLUMN = "dropped_index"
#: Column holding each conversation's position in its input data.
SOURCE_INDEX_COLUMN = "source_index"
#: How many dropped conversations' positions the summary names per reason.
MAX_REPORTED_INDICES = 10


def with_source_index(dataset: HFDataset) -> HFDataset:
    """The raw conversations with their input positions, before any shuffle."""
    columns = dataset.column_names
    if "conversations" not in columns or SOURCE_INDEX_COLUMN in columns:
        return dataset
    return dataset.add_column(SOURCE_INDEX_COLUMN, range(len(dataset)))


def pad_dropped(results: dict[str, list]) -> None:
    """Give the rows appended so far (kept rows) an empty drop reason."""
    missing = len(results["input_ids"]) - len(results.setdefault(DROPPED_COLUMN, []))
    results[DROPPED_COLUMN] += [""] * missing
    results.setdefault(DROPPED_INDEX_COLUMN, []).extend([-1] * missing)


def append_dropped(results: dict[str, list], position: int, reason: str) -> None:
    """Record a dropped conversation as an empty row carrying its reason.

    :param results: The batch's output columns.
    :param position: The conversation's position in its input data.
    :param reason: ``"ErrorType: message"``.
    """
    pad_dropped(results)
    results["input_ids"].append(torch.tensor([], dtype=torch.long))
    results["loss_mask"].append(torch.tensor([], dtype=torch.long))
    results["seq_len"].append(0)
    if "messages" in results:
        results["messages"].append([])
    results[DROPPED_COLUMN].append(reason)
    results[DROPPED_INDEX_COLUMN].append(position)


def remove_dropped(dataset: HFDataset, *, allow_empty: bool) -> HFDataset:
    """Drop the rows of failed conversations, reporting how many and why.

    :param dataset: The output of the preprocessing map.
    :param allow_empty: Return an empty dataset when every conversation failed.
    :raises NoSamplesError: Every conversation failed, unless ``allow_empty``.
    """
    if DROPPED_COLUMN not in dataset.column_names:
        return dataset
    reasons = dataset[DROPPED_COLUMN]
    columns = [DROPPED_COLUMN, DROPPED_INDEX_COLUMN]
    if not any(reasons):
        return dataset.remove_columns(columns)
    kept = [i for i, reason in enumerate(reasons) if not reason]
    dropped: dict[str, list[int]] = defaultdict(list)
    for reason, position in zip(reasons, dataset[DROPPED_INDEX_COLUMN], strict=True):
        if reason:
            dropped[reason.split(":", 1)[0]].append(position)
    dataset = dataset.select(kept).remove_columns(columns)
    first = next(reason for reason in reasons if reason)
    shown = MAX_REPORTED_INDICES
    summary = "; ".join(
        f"{len(positions)} x {kind} (conversations "
        f"{', '.join(map(str, sorted(positions)[:shown]))}"
        f"{', ...' if len(positions) > shown else ''})"
        for kind, positions in sorted(dropped.items(), key=lambda kv: -len(kv[1]))
    )
    message = (
        f"Dropped {sum(map(len, dropped.values()))} conversations that could not "
        f"be rendered or split: {summary}. First reason: {first}"
    )
    if kept or allow_empty:
        logger.warning(message)
        return dataset
    raise NoSamplesError(
        f"No training rows: every conversation was dropped. {message}. Pass "
        "--allow-empty-output if an empty dataset is intentional."
    )
