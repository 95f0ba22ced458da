"""The on-disk format: ``hs_<i>.safetensors`` as upstream's trainer reads it.

Each file holds ``hidden_states`` ``[seq, n_aux + 1, hidden]`` and ``token_ids``
``[seq]``, plus one metadata entry (the aux layer ids and the decoder prefix). A
file is written under a temporary name and renamed, so a killed run leaves either
a whole file or none; on resume a file counts as done only if its header, dtype,
layer ids and token ids match what would be written now.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save

__all__ = [
    "HS_DIRNAME",
    "file_metadata",
    "hs_path",
    "is_complete",
    "remove_stale_temps",
    "write_atomic",
]

HS_DIRNAME = "hidden_states"
_META_KEY = "speculators_kimi"
_ST_DTYPES = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32"}


def hs_path(out_dir: Path, idx: int) -> Path:
    """Where sample ``idx``'s hidden states go (upstream's file name)."""
    return out_dir / f"hs_{idx}.safetensors"


def file_metadata(layer_ids: Sequence[int], prefix: str) -> dict[str, str]:
    """The files' metadata: one entry, so the bytes do not depend on hash order."""
    info = {"target_layer_ids": list(layer_ids), "verifier_prefix": prefix}
    return {_META_KEY: json.dumps(info, sort_keys=True)}


def is_complete(
    path: Path,
    token_ids: Sequence[int],
    *,
    num_entries: int,
    hidden_size: int,
    dtype: torch.dtype,
    layer_ids: Sequence[int],
) -> bool:
    """Whether ``path`` is a finished, matching file (reads header + token ids)."""
    if not path.is_file():
        return False
    try:
        with safe_open(str(path), framework="pt") as f:
            if set(f.keys()) != {"hidden_states", "token_ids"}:
                return False
            meta = json.loads((f.metadata() or {}).get(_META_KEY, "{}"))
            if meta.get("target_layer_ids") != list(layer_ids):
                return False
            hs = f.get_slice("hidden_states")
            if list(hs.get_shape()) != [len(token_ids), num_entries, hidden_size]:
                return False
            if hs.get_dtype() != _ST_DTYPES.get(dtype):
                return False
            tok = f.get_tensor("token_ids")
        return tok.tolist() == list(token_ids)
    except Exception:
        return False


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
