"""Checkpoints are written atomically and torn ones never block resume."""

import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from speculators.train.checkpoint_files import incomplete_reason, staging_dir
from speculators.train.checkpointer import SingleGPUCheckpointer


def _write_checkpoint(directory: Path, value: float = 1.0) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text("{}")
    save_file({"w": torch.full((64, 64), value)}, str(directory / "model.safetensors"))
    torch.save({"state": {}, "param_groups": []}, directory / "optimizer_state_dict.pt")


def _truncate(path: Path, keep: int) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:keep])


def test_complete_checkpoint_has_no_reason(tmp_path):
    _write_checkpoint(tmp_path / "0")
    assert incomplete_reason(tmp_path / "0") is None
    # An empty directory is not a torn save.
    (tmp_path / "1").mkdir()
    assert incomplete_reason(tmp_path / "1") is None


@pytest.mark.parametrize(
    ("tear", "reason"),
    [
        (lambda d: (d / "model.safetensors").unlink(), "model.safetensors is missing"),
        (
            lambda d: _truncate(d / "model.safetensors", 4),
            "model.safetensors has no valid safetensors header",
        ),
        (
            lambda d: _truncate(d / "model.safetensors", 4000),
            "model.safetensors is truncated",
        ),
        (
            lambda d: (d / "optimizer_state_dict.pt").unlink(),
            "optimizer_state_dict.pt is missing",
        ),
        (
            lambda d: _truncate(d / "optimizer_state_dict.pt", 10),
            "optimizer_state_dict.pt is truncated",
        ),
    ],
    ids=["no-weights", "no-header", "short-weights", "no-optimizer", "short-optimizer"],
)
def test_torn_checkpoint_is_recognised(tmp_path, tear, reason):
    _write_checkpoint(tmp_path / "0")
    tear(tmp_path / "0")
    assert reason in (incomplete_reason(tmp_path / "0") or "")


def test_resume_sets_torn_checkpoint_aside(tmp_path, caplog):
    _write_checkpoint(tmp_path / "0")
    _write_checkpoint(tmp_path / "1")
    _truncate(tmp_path / "1" / "model.safetensors", 4000)
    (tmp_path / "epoch1_end").symlink_to("1", target_is_directory=True)
    (tmp_path / "checkpoint_best").symlink_to("0", target_is_directory=True)
    torn_bytes = (tmp_path / "1" / "model.safetensors").read_bytes()

    with caplog.at_level(logging.WARNING, logger="speculators"):
        cp = SingleGPUCheckpointer(tmp_path)

    assert cp.previous_epoch == 0
    aside = tmp_path / "1.incomplete"
    assert str(tmp_path / "1") in caplog.text
    assert str(aside) in caplog.text
    # Nothing written is lost: the torn directory is kept, byte for byte.
    assert (aside / "model.safetensors").read_bytes() == torn_bytes
    assert not (tmp_path / "epoch1_end").is_symlink()
    assert (tmp_path / "checkpoint_best").resolve() == (tmp_path / "0").resolve()


def test_interrupted_save_leaves_previous_checkpoint_intact(tmp_path):
    _write_checkpoint(tmp_path / "0", value=1.0)
    before = (tmp_path / "0" / "model.safetensors").read_bytes()
    cp = SingleGPUCheckpointer(tmp_path)

    def killed_mid_save() -> None:
        with cp.writing(0) as staging:
            _write_checkpoint(staging, value=2.0)
            assert cp.model_path(0) == staging / "model.safetensors"
            raise RuntimeError("killed mid-save")

    with pytest.raises(RuntimeError):
        killed_mid_save()

    assert (tmp_path / "0" / "model.safetensors").read_bytes() == before
    assert staging_dir(tmp_path / "0").exists()
    # The next start sets the half-written staging directory aside.
    assert SingleGPUCheckpointer(tmp_path).previous_epoch == 0
    assert not staging_dir(tmp_path / "0").exists()
    assert (tmp_path / "0.incomplete").is_dir()


def test_writing_replaces_a_checkpoint_only_when_complete(tmp_path):
    cp = SingleGPUCheckpointer(tmp_path)
    with cp.writing(3) as staging:
        _write_checkpoint(staging, value=1.0)
        assert not (tmp_path / "3").exists()
    with cp.writing(3) as staging:
        _write_checkpoint(staging, value=2.0)
    assert cp.model_path(3) == tmp_path / "3" / "model.safetensors"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["3"]
    assert incomplete_reason(tmp_path / "3") is None
    assert SingleGPUCheckpointer(tmp_path).previous_epoch == 3


def test_save_killed_between_renames_restores_the_previous_checkpoint(tmp_path):
    # commit_staged renames <epoch> to .<epoch>.replaced before moving the new
    # one in; a kill between the two renames leaves only the old one.
    _write_checkpoint(tmp_path / ".2.replaced")
    _write_checkpoint(tmp_path / "1")
    assert SingleGPUCheckpointer(tmp_path).previous_epoch == 2
    assert incomplete_reason(tmp_path / "2") is None
