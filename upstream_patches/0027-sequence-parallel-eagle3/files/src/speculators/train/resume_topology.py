# SPDX-License-Identifier: Apache-2.0
"""Whether a checkpoint can be resumed at this run's degree and world size.

A checkpoint's model and optimizer state are whole (DDP replicas; FSDP saves
full state dicts), so they load at any world size. What a resumed run must
share with the run that saved it is the data-parallel (DP) size, the world
size divided by ``--sp-size``: the sampler packs each step's batches for that
many DP ranks, so the batches of every step, the steps per epoch (and so the
mid-epoch position and the learning-rate schedule) and the samples averaged in
each update all depend on it. Sequence parallelism does not change the update
(each SP group computes its sequence's one-process gradient), so a run resumed
at another ``--sp-size`` or world size with the same DP size continues the same
training; one at another DP size is refused.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from speculators.train import distributed

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

__all__ = [
    "TOPOLOGY_FILE",
    "TOPOLOGY_KEYS",
    "check_resume_topology",
    "save_training_topology",
    "training_topology",
]

logger = logging.getLogger("speculators")

#: Written next to ``training_state.json``, whose keys upstream's tests fix.
TOPOLOGY_FILE = "training_topology.json"
#: The topology that wrote a checkpoint.
TOPOLOGY_KEYS = ("world_size", "sp_size", "dp_size")


def training_topology() -> dict[str, int]:
    """This run's world size, ``--sp-size`` and data-parallel size."""
    return {
        "world_size": distributed.get_world_size(),
        "sp_size": distributed.get_sp_size(),
        "dp_size": distributed.get_dp_size(),
    }


def save_training_topology(checkpoint_dir: Path) -> None:
    """Record this run's topology in ``checkpoint_dir`` (rank 0 calls it)."""
    (checkpoint_dir / TOPOLOGY_FILE).write_text(json.dumps(training_topology()))


def _saved_topology(path: Path) -> dict[str, int] | None:
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict):
        return None
    then: dict[str, int] = {}
    for key in TOPOLOGY_KEYS:
        value = saved.get(key)
        if not isinstance(value, int):
            return None
        then[key] = value
    return then


def check_resume_topology(
    checkpoint_dir: Path, current: Mapping[str, int] | None = None
) -> None:
    """Refuse to resume ``checkpoint_dir`` at another data-parallel size.

    A checkpoint without a readable record (written before ``--sp-size``
    existed) is resumed as it always was, with a warning.

    :param checkpoint_dir: The checkpoint being resumed, e.g. ``<save_path>/3``.
    :param current: This run's topology (default: :func:`training_topology`).
    :raises ConfigError: in one line naming both DP sizes and the fix.
    """
    # Imported here: the CLI's configuration layer is not the trainer's.
    from speculators.train.config.resolution import ConfigError  # noqa: PLC0415

    path = checkpoint_dir / TOPOLOGY_FILE
    now = dict(current) if current is not None else training_topology()
    then = _saved_topology(path)
    if then is None:
        logger.warning(
            f"{path} is missing or unreadable: resuming {checkpoint_dir} without "
            "checking the data-parallel size it was trained at."
        )
        return
    if then["dp_size"] != now["dp_size"]:
        raise ConfigError(
            f"{path} was saved at data-parallel size {then['dp_size']} "
            f"({then['world_size']} processes / --sp-size {then['sp_size']}) and "
            f"this run's is {now['dp_size']} ({now['world_size']} / "
            f"{now['sp_size']}): its batches and schedule depend on it; launch "
            f"--sp-size x {then['dp_size']} processes, or start a new run from "
            f"its weights with --from-pretrained {checkpoint_dir} and another "
            "--save-path."
        )
    if then != now:
        logger.info(
            f"Resuming {checkpoint_dir} at world size {now['world_size']} and "
            f"--sp-size {now['sp_size']} (saved at {then['world_size']} and "
            f"{then['sp_size']}): the same data-parallel size {now['dp_size']}, "
            "so the same batches, schedule and updates."
        )
