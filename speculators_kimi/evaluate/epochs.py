"""The epoch to ship: every checkpoint of a training run measured on the same
prompts, the best named by acceptance length.

``speculators train`` keeps ``checkpoint_best`` by validation loss; a loss that
improves can hide an acceptance that does not, so the table puts each epoch's
mean acceptance length beside its validation loss (``loss_epoch`` of the
checkpoint's ``val_metrics.json``) and picks by acceptance. ``export`` takes the
table's file and exports the epoch it picked.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import CommandError, MissingInputError

__all__ = [
    "EPOCH_TABLE_FORMAT",
    "EpochRow",
    "best_epoch",
    "epoch_checkpoints",
    "epoch_table",
    "table_choice",
]

#: ``format`` of the table ``evaluate --each-epoch`` writes with ``--json``.
EPOCH_TABLE_FORMAT = "speculators-kimi/epoch-table/v1"


@dataclass(frozen=True)
class EpochRow:
    """One epoch's checkpoint and what it measured."""

    epoch: int
    checkpoint: str
    val_loss: float | None  # None: the checkpoint has no val_metrics.json
    mean_acceptance_length: float


def epoch_checkpoints(run: str | Path) -> list[tuple[int, Path]]:
    """``(epoch, directory)`` of each checkpoint in a training run's checkpoints
    directory (its numbered subdirectories holding a ``config.json``), in order.

    :raises MissingInputError: ``run`` holds no such checkpoint.
    """
    run = Path(run)
    found = (
        sorted(
            (int(path.name), path)
            for path in run.iterdir()
            if path.name.isdigit() and (path / "config.json").is_file()
        )
        if run.is_dir()
        else []
    )
    if not found:
        raise MissingInputError(
            f"--draft {run}: no epoch checkpoints (numbered directories with a "
            "config.json); --each-epoch takes the checkpoints directory of "
            "`speculators train` (its --save-path)"
        )
    return found


def _val_loss(checkpoint: Path) -> float | None:
    metrics = checkpoint / "val_metrics.json"
    if not metrics.is_file():
        return None
    loss = json.loads(metrics.read_text()).get("loss_epoch")
    return None if loss is None else float(loss)


def best_epoch(rows: Sequence[EpochRow]) -> EpochRow:
    """The highest acceptance length; ties go to the lower validation loss,
    then to the earlier epoch."""
    return max(
        rows,
        key=lambda r: (
            r.mean_acceptance_length,
            -(r.val_loss if r.val_loss is not None else float("inf")),
            -r.epoch,
        ),
    )


def epoch_table(run: str | Path, measure: Callable[[Path], float]) -> dict[str, Any]:
    """Every epoch of ``run`` measured by ``measure`` (its mean acceptance
    length on fixed prompts), and the epoch picked."""
    rows = [
        EpochRow(epoch, str(path.resolve()), _val_loss(path), measure(path))
        for epoch, path in epoch_checkpoints(run)
    ]
    by_loss = min(
        (r for r in rows if r.val_loss is not None),
        key=lambda r: r.val_loss or 0.0,
        default=None,
    )
    best = best_epoch(rows)
    return {
        "format": EPOCH_TABLE_FORMAT,
        "run": str(Path(run).resolve()),
        "epochs": [asdict(r) for r in rows],
        "best": asdict(best),
        "lowest_val_loss_epoch": None if by_loss is None else by_loss.epoch,
    }


def table_choice(path: Path) -> Path | None:
    """The checkpoint an epoch table picked, when ``path`` is such a table
    (else None: ``path`` is taken as a checkpoint)."""
    if not path.is_file():
        return None
    try:
        table = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(table, dict) or table.get("format") != EPOCH_TABLE_FORMAT:
        return None
    best = table.get("best")
    if not isinstance(best, dict) or not isinstance(best.get("checkpoint"), str):
        raise CommandError(
            f"{path}: an epoch table without its pick (best.checkpoint); write it "
            "again with speculators-kimi evaluate --each-epoch --json"
        )
    return Path(best["checkpoint"])
