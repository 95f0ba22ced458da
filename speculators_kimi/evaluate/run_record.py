"""What a training run recorded about itself: the ``run.yaml`` that ``speculators
train`` writes beside its checkpoints, read for the settings evaluation must
share with training (the held-out split, the training length)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["recorded_train_data_ratio", "run_config"]


def run_config(checkpoint: Path) -> tuple[dict[str, Any], Path] | None:
    """The ``train`` section of the run's ``run.yaml`` (in ``checkpoint`` or the
    directory above it, where the trainer writes it) and its path."""
    import yaml

    for run_yaml in (checkpoint / "run.yaml", checkpoint.parent / "run.yaml"):
        if run_yaml.is_file():
            run = yaml.safe_load(run_yaml.read_text()) or {}
            return run.get("train") or {}, run_yaml
    return None


def recorded_train_data_ratio(checkpoint: Path) -> float | None:
    """The ``--train-data-ratio`` the run trained with (upstream's default when
    its ``run.yaml`` does not set it); ``None`` without a ``run.yaml``."""
    found = run_config(checkpoint)
    if found is None:
        return None
    data = found[0].get("data") or {}
    if "train_data_ratio" in data:
        return float(data["train_data_ratio"])
    from speculators.train.config.schema import DataArgs

    return float(DataArgs().train_data_ratio)
