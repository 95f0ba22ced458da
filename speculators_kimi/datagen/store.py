"""The on-disk format: ``hs_<i>.safetensors`` as upstream's trainer reads it.

Each file holds ``hidden_states`` ``[seq, n_aux + 1, hidden]`` and ``token_ids``
``[seq]``, plus one metadata entry, unit 0016's ``speculators.provenance``: the
verifier that produced it (its path and content fingerprint, which ``speculators
train`` checks), the aux layer ids and, ours, the decoder prefix. One entry,
because safetensors writes its metadata map in hash order: two entries would
make a file's bytes differ from run to run. A file is written under a temporary
name and renamed, so a killed run leaves either a whole file or none; on resume a
file counts as done only if its header, dtype, layer ids, verifier fingerprint
and token ids match what would be written now. The directory itself is created
and proven writable before any model is loaded.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from enum import Enum
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save
from speculators.data_generation.provenance import (
    provenance_metadata,
    provenance_of,
)

from ..errors import CommandError

__all__ = [
    "HS_DIRNAME",
    "FileState",
    "OutputDirError",
    "file_metadata",
    "file_settings",
    "file_state",
    "hs_path",
    "prepare_output_dir",
    "remove_stale_temps",
    "write_atomic",
]

HS_DIRNAME = "hidden_states"
_ST_DTYPES = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32"}


class OutputDirError(CommandError):
    """The output directory cannot be created or written."""


def prepare_output_dir(out_dir: Path) -> None:
    """Create ``out_dir`` and prove it writable before any model is loaded."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / f".write-probe{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except (FileExistsError, NotADirectoryError):
        blocker = next(
            (p for p in (out_dir, *out_dir.parents) if p.exists() and not p.is_dir()),
            out_dir,
        )
        raise OutputDirError(
            f"--output-dir {out_dir}: {blocker} is a file, not a directory; "
            "choose another --output-dir"
        ) from None
    except PermissionError as err:
        raise OutputDirError(
            f"--output-dir {out_dir}: no permission to write {err.filename}; "
            "choose a directory you can write, or fix its permissions"
        ) from None


def hs_path(out_dir: Path, idx: int) -> Path:
    """Where sample ``idx``'s hidden states go (upstream's file name)."""
    return out_dir / f"hs_{idx}.safetensors"


def file_metadata(
    layer_ids: Sequence[int], prefix: str, verifier: str, fingerprint: str
) -> dict[str, str]:
    """The files' metadata: one entry (see the module docstring)."""
    return provenance_metadata(
        fingerprint, verifier, list(layer_ids), verifier_prefix=prefix
    )


class FileState(Enum):
    """What a file on disk is, compared with what would be written now."""

    DONE = "done"
    ABSENT = "absent"
    #: Whole and of the right shape, but made by a verifier with another
    #: fingerprint (other weights or config), or of another width.
    OTHER_VERIFIER = "other verifier"
    #: Whole, of these tokens, but made with other ``--target-layer-ids`` or
    #: ``--dtype``: a rerun that forgot a flag, replaced only on ``--overwrite``.
    OTHER_SETTINGS = "other settings"
    #: Whole, but of other tokens: the dataset was prepared again, or the
    #: folder holds another dataset's states.
    OTHER_TOKENS = "other tokens"
    #: Torn (a killed write), or not a hidden-states file.
    STALE = "stale"


def file_state(
    path: Path,
    token_ids: Sequence[int],
    *,
    num_entries: int,
    hidden_size: int,
    dtype: torch.dtype,
    layer_ids: Sequence[int],
    fingerprint: str,
) -> FileState:
    """Whether ``path`` is a finished, matching file (reads header + token ids)."""
    if not path.is_file():
        return FileState.ABSENT
    try:
        with safe_open(str(path), framework="pt") as f:
            if set(f.keys()) != {"hidden_states", "token_ids"}:
                return FileState.STALE
            made_by = provenance_of(f.metadata()) or {}
            hs = f.get_slice("hidden_states")
            shape, stored = list(hs.get_shape()), hs.get_dtype()
            tok = f.get_tensor("token_ids")
    except Exception:
        return FileState.STALE
    if tok.tolist() != list(token_ids):
        return FileState.OTHER_TOKENS
    if shape[:1] != [len(token_ids)]:
        return FileState.STALE
    if made_by.get("target_layer_ids") != list(layer_ids) or stored != _ST_DTYPES.get(
        dtype
    ):
        return FileState.OTHER_SETTINGS
    if shape != [len(token_ids), num_entries, hidden_size]:
        return (
            FileState.OTHER_VERIFIER if shape[-1:] != [hidden_size] else FileState.STALE
        )
    if made_by.get("verifier_fingerprint") != fingerprint:
        return FileState.OTHER_VERIFIER
    return FileState.DONE


def file_settings(path: Path) -> tuple[list[int] | None, str]:
    """The target layer ids and the hidden states' dtype a file was made with."""
    with safe_open(str(path), framework="pt") as f:
        made_by = provenance_of(f.metadata()) or {}
        stored = f.get_slice("hidden_states")[:1].dtype
    return made_by.get("target_layer_ids"), str(stored).removeprefix("torch.")


def write_atomic(
    path: Path, tensors: dict[str, torch.Tensor], meta: dict[str, str]
) -> None:
    """Serialize here and rename into place under our own temporary name.

    ``save_file``'s own temporary file (``.tmpXXXXXX``) would survive a killed run.
    """
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(save(tensors, metadata=meta))
    tmp.replace(path)


def remove_stale_temps(out_dir: Path) -> None:
    """Temporary files of a killed run (never a finished file)."""
    for stale in out_dir.glob(".hs_*.tmp*"):
        stale.unlink(missing_ok=True)
