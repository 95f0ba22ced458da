"""Checkpoint directories that are either complete or absent.

A checkpoint is written into a staging directory next to its final place and
renamed into place once every file in it is flushed to disk, so a run killed
mid-save never leaves a half-written ``<epoch>/`` behind. On resume, checkpoint
directories that are torn anyway (written by an older version, or damaged on
disk) are recognised and set aside instead of being loaded.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import zipfile
from pathlib import Path

__all__ = [
    "INCOMPLETE_SUFFIX",
    "STAGING_SUFFIX",
    "commit_staged",
    "fsync_tree",
    "incomplete_reason",
    "set_aside",
    "set_aside_incomplete",
    "staging_dir",
]

logger = logging.getLogger("speculators")

#: Suffix of the directory a checkpoint is written into before it is complete.
STAGING_SUFFIX = ".partial"
#: Suffix of an incomplete checkpoint directory that was set aside on resume.
INCOMPLETE_SUFFIX = ".incomplete"
_REPLACED_SUFFIX = ".replaced"

_MODEL_FILE = "model.safetensors"
_OPTIMIZER_FILE = "optimizer_state_dict.pt"
_CONFIG_FILE = "config.json"


def staging_dir(final: Path) -> Path:
    """The hidden directory ``final`` is written into until it is complete."""
    return final.with_name(f".{final.name}{STAGING_SUFFIX}")


def _replaced_dir(final: Path) -> Path:
    return final.with_name(f".{final.name}{_REPLACED_SUFFIX}")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """Flush every file under ``root``, then the directories, to disk."""
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            path = Path(dirpath) / name
            if not path.is_symlink():
                _fsync(path)
        _fsync(Path(dirpath))


def commit_staged(staging: Path, final: Path) -> None:
    """Move the complete checkpoint in ``staging`` to ``final``.

    Files are flushed before the rename. An existing ``final`` (a mid-epoch
    checkpoint saved again) stays in place until the new one has replaced it.

    :param staging: The staging directory, as returned by :func:`staging_dir`.
    :param final: The checkpoint's directory, e.g. ``<save_path>/3``.
    """
    fsync_tree(staging)
    replaced = _replaced_dir(final)
    if final.exists():
        if replaced.exists():
            shutil.rmtree(replaced)
        final.rename(replaced)
    staging.rename(final)
    _fsync(final.parent)
    if replaced.exists():
        shutil.rmtree(replaced)


def _safetensors_problem(path: Path) -> str | None:
    size = path.stat().st_size
    try:
        with path.open("rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            if header_len > size - 8:
                return f"{path.name} is truncated (its header is cut off)"
            header = json.loads(f.read(header_len))
    except (struct.error, ValueError, UnicodeDecodeError):
        return f"{path.name} has no valid safetensors header"
    ends = [
        entry["data_offsets"][1]
        for name, entry in header.items()
        if name != "__metadata__"
    ]
    expected = 8 + header_len + max(ends, default=0)
    if size < expected:
        return f"{path.name} is truncated ({size} of {expected} bytes)"
    return None


def incomplete_reason(checkpoint: Path) -> str | None:
    """Why ``checkpoint`` cannot be resumed from, or ``None`` if it can.

    Reads no tensor data: the weights file's safetensors header and size, and
    the optimizer file's zip directory. Only directories a save wrote into are
    judged: every save writes ``config.json`` first, so a directory without it
    (empty, or laid out by hand) is left alone.

    :param checkpoint: A checkpoint directory, e.g. ``<save_path>/3``.
    :return: A short reason naming the missing or torn file, or ``None``.
    """
    if not (checkpoint / _CONFIG_FILE).is_file():
        return None
    model = checkpoint / _MODEL_FILE
    optimizer = checkpoint / _OPTIMIZER_FILE
    if model.is_file():
        problem = _safetensors_problem(model)
        if problem:
            return problem
        if not optimizer.is_file():
            return f"{_OPTIMIZER_FILE} is missing"
    else:
        return f"{_MODEL_FILE} is missing"
    if optimizer.is_file() and not zipfile.is_zipfile(optimizer):
        return f"{_OPTIMIZER_FILE} is truncated or not a torch.save file"
    return None


def set_aside(checkpoint: Path, reason: str) -> Path:
    """Rename an incomplete checkpoint out of the resume path and warn.

    Nothing is deleted: the directory becomes ``<name>.incomplete`` (or
    ``<name>.incomplete-<n>``), and symlinks in its parent that pointed at it
    (``checkpoint_best``, ``epoch<N>_end``, ...) are removed.

    :param checkpoint: The incomplete directory (a checkpoint or a staging one).
    :param reason: Why it is incomplete, for the warning.
    :return: Where the directory now is.
    """
    parent = checkpoint.parent
    name = checkpoint.name.lstrip(".").removesuffix(STAGING_SUFFIX)
    target = parent / f"{name}{INCOMPLETE_SUFFIX}"
    n = 1
    while target.exists() or target.is_symlink():
        target = parent / f"{name}{INCOMPLETE_SUFFIX}-{n}"
        n += 1
    checkpoint.rename(target)
    for link in parent.iterdir():
        if link.is_symlink() and (parent / link.readlink()) == checkpoint:
            link.unlink()
            logger.warning("Removed %s, which pointed at %s.", link, checkpoint)
    logger.warning(
        "Checkpoint %s is incomplete (%s), probably from a run killed while "
        "saving; resuming without it. It was moved to %s; delete it when you "
        "no longer need it.",
        checkpoint,
        reason,
        target,
    )
    return target


def _restore_replaced(root: Path) -> None:
    """Undo a save killed between its two renames (see :func:`commit_staged`).

    A ``.<name>.replaced`` directory whose ``<name>`` is missing is the previous,
    complete checkpoint: it goes back into place.
    """
    for replaced in root.glob(f".*{_REPLACED_SUFFIX}"):
        final = root / replaced.name[1 : -len(_REPLACED_SUFFIX)]
        if not final.exists():
            replaced.rename(final)
            logger.warning("Restored %s from %s.", final, replaced)


def set_aside_incomplete(root: Path) -> None:
    """Make the newest complete checkpoint under ``root`` the newest one there.

    Restores a checkpoint a killed save had moved out of the way, and sets aside
    (see :func:`set_aside`) leftover staging directories and torn checkpoints.

    :param root: The checkpoint root (``save_path``).
    """
    if not root.is_dir():
        return
    _restore_replaced(root)
    for d in sorted(root.iterdir()):
        if d.is_symlink() or not d.is_dir():
            continue
        if d.name.startswith(".") and d.name.endswith(STAGING_SUFFIX):
            set_aside(d, "its save did not finish")
        elif d.name.isdigit() or d.name == "interrupted":
            reason = incomplete_reason(d)
            if reason:
                set_aside(d, reason)
