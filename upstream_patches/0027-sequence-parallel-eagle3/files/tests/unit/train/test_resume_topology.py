# SPDX-License-Identifier: Apache-2.0
"""A checkpoint resumes at another ``--sp-size`` or world size only when the
data-parallel size, which fixes each step's batches, is the same."""

import json
import logging

import pytest

from speculators.train.config.resolution import ConfigError
from speculators.train.resume_topology import (
    TOPOLOGY_FILE,
    check_resume_topology,
    save_training_topology,
)


def _topology(world_size: int, sp_size: int) -> dict[str, int]:
    return {
        "world_size": world_size,
        "sp_size": sp_size,
        "dp_size": world_size // sp_size,
    }


@pytest.fixture
def checkpoint(tmp_path):
    directory = tmp_path / "checkpoints" / "1"
    directory.mkdir(parents=True)
    return directory


def _saved_at(checkpoint, world_size: int, sp_size: int) -> None:
    topology = _topology(world_size, sp_size)
    (checkpoint / TOPOLOGY_FILE).write_text(json.dumps(topology))


def test_one_process_records_itself(checkpoint):
    save_training_topology(checkpoint)
    saved = json.loads((checkpoint / TOPOLOGY_FILE).read_text())
    assert saved == _topology(1, 1)
    check_resume_topology(checkpoint)


@pytest.mark.parametrize(
    ("saved", "now"),
    [
        ((2, 2), (1, 1)),  # --sp-size 2 on two processes, resumed on one
        ((1, 1), (4, 4)),
        ((4, 2), (2, 1)),  # two SP groups of two, resumed as DDP over two
        ((2, 2), (2, 2)),
    ],
)
def test_same_data_parallel_size_resumes(checkpoint, saved, now, caplog):
    _saved_at(checkpoint, *saved)
    with caplog.at_level(logging.INFO, logger="speculators"):
        check_resume_topology(checkpoint, _topology(*now))
    moved = saved != now
    assert ("the same data-parallel size" in caplog.text) == moved


@pytest.mark.parametrize(
    ("saved", "now", "sizes"),
    [
        ((2, 1), (1, 1), "data-parallel size 2 (2 processes / --sp-size 1)"),
        ((2, 2), (2, 1), "data-parallel size 1 (2 processes / --sp-size 2)"),
        ((4, 2), (4, 4), "data-parallel size 2 (4 processes / --sp-size 2)"),
    ],
)
def test_another_data_parallel_size_is_refused_in_one_line(
    checkpoint, saved, now, sizes
):
    _saved_at(checkpoint, *saved)
    with pytest.raises(ConfigError) as caught:
        check_resume_topology(checkpoint, _topology(*now))
    dp_then, dp_now = saved[0] // saved[1], now[0] // now[1]
    assert str(caught.value) == (
        f"{checkpoint / TOPOLOGY_FILE} was saved at {sizes} and this run's is "
        f"{dp_now} ({now[0]} / {now[1]}): its batches and schedule depend on it; "
        f"launch --sp-size x {dp_then} processes, or start a new run from its "
        f"weights with --from-pretrained {checkpoint} and another --save-path."
    )


@pytest.mark.parametrize("record", [None, "{", '{"world_size": 2}'])
def test_a_checkpoint_without_the_record_resumes_with_a_warning(
    checkpoint, record, caplog
):
    if record is not None:
        (checkpoint / TOPOLOGY_FILE).write_text(record)
    with caplog.at_level(logging.WARNING, logger="speculators"):
        check_resume_topology(checkpoint, _topology(2, 2))
    assert f"{checkpoint / TOPOLOGY_FILE} is missing or unreadable" in caplog.text
