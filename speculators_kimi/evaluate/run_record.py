"""What a training run recorded about itself: the ``run.yaml`` that ``speculators
train`` writes beside its checkpoints, read for the settings evaluation must
share with training (the held-out split, the training length)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["data_arg", "run_config"]


def run_config(checkpoint: Path) -> tuple[dict[str, Any], Path] | None:
    """The ``train`` section of the run's ``run.yaml`` (in ``checkpoint`` or the
    directory above it, where the trainer writes it) and its path."""
    import yaml

    for run_yaml in (checkpoint / "run.yaml", checkpoint.parent / "run.yaml"):
        if run_yaml.is_file():
            run = yaml.safe_load(run_yaml.read_text()) or {}
            return run.get("train") or {}, run_yaml
    return None


def data_arg(train: dict[str, Any], name: str) -> Any:
    """``train.data.<name>`` as the run recorded it, else upstream's default
    (``DataArgs``): ``run.yaml`` leaves out what the run did not set."""
    data = train.get("data") or {}
    if name in data:
        return data[name]
    from speculators.train.config.schema import DataArgs

    return getattr(DataArgs(), name)
