"""Which verifier produced a hidden-state file: a cheap content fingerprint.

Hidden states are a function of the verifier's text config and of its decoder's
weights. Files written by another verifier of the same shapes train a draft for
the wrong model without any error, so a hidden-state file records who wrote it
(``PROVENANCE_KEY`` in its safetensors metadata) and readers compare that with
the verifier they are given.

The fingerprint hashes the text config and, for every tensor of the decoder
(the keys under its checkpoint prefix), its key, dtype and shape and a few bytes
at the start, middle and end of its data. No tensor is read whole, so it is
cheap even for a trillion-parameter checkpoint, and two checkpoints that differ
in the values of any whole tensor get different fingerprints.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

from safetensors import safe_open

from speculators.utils.text_config import load_config_dict, text_config_dict
from speculators.utils.verifier_weights.files import read_weight_index

__all__ = [
    "PROVENANCE_KEY",
    "decoder_fingerprint",
    "local_checkpoint_dir",
    "provenance_metadata",
    "provenance_of",
    "read_provenance",
]

#: The safetensors metadata entry of a hidden-state file that names its producer.
PROVENANCE_KEY = "speculators.provenance"
_SAMPLE_BYTES = 64
# Config entries that say where a config was read from, not what the model is.
_NOT_CONTENT = ("_name_or_path", "transformers_version", "_commit_hash")


def _tensor_spans(shard: Path) -> dict[str, tuple[str, list[int], int, int]]:
    """``{key: (dtype, shape, start, end)}`` of a shard, byte offsets in the file."""
    with shard.open("rb") as handle:
        (size,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(size))
    base = 8 + size
    return {
        key: (
            info["dtype"],
            info["shape"],
            base + info["data_offsets"][0],
            base + info["data_offsets"][1],
        )
        for key, info in header.items()
        if key != "__metadata__"
    }


def _samples(handle: Any, start: int, end: int) -> bytes:
    """A few bytes at the start, middle and end of ``[start, end)``."""
    length = end - start
    last = max(0, length - _SAMPLE_BYTES)
    out = b""
    for offset in (0, min(length // 2, last), last):
        handle.seek(start + offset)
        out += handle.read(min(_SAMPLE_BYTES, length))
    return out


def decoder_fingerprint(directory: str | Path, prefix: str) -> str:
    """The fingerprint of a local checkpoint's text config and decoder weights.

    :param directory: the verifier's checkpoint directory (config and shards).
    :param prefix: the decoder's key prefix in the weight map (e.g.
        ``language_model.model``; empty when the keys have none).
    :return: a hex digest.
    :raises FileNotFoundError: a shard holding decoder tensors is not there.
    """
    directory = Path(directory)
    text = text_config_dict(load_config_dict(directory))
    content = {k: v for k, v in text.items() if k not in _NOT_CONTENT}
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode())
    scope = f"{prefix}." if prefix else ""
    by_shard: dict[str, list[str]] = {}
    for key, shard in read_weight_index(directory).items():
        if key.startswith(scope):
            by_shard.setdefault(shard, []).append(key)
    for shard in sorted(by_shard):
        spans = _tensor_spans(directory / shard)
        with (directory / shard).open("rb") as handle:
            for key in sorted(by_shard[shard]):
                dtype, shape, start, end = spans[key]
                digest.update(f"{key[len(scope) :]}|{dtype}|{shape}|".encode())
                digest.update(_samples(handle, start, end))
    return digest.hexdigest()


def local_checkpoint_dir(name_or_path: str | Path) -> Path | None:
    """The local directory of a checkpoint: itself, or a Hub id's cached snapshot
    (no download); ``None`` when there is none."""
    path = Path(name_or_path)
    if path.is_dir():
        return path
    from huggingface_hub import try_to_load_from_cache  # noqa: PLC0415

    cached = try_to_load_from_cache(str(name_or_path), "config.json")
    return Path(cached).parent if isinstance(cached, str) else None


def provenance_metadata(
    fingerprint: str, verifier: str, target_layer_ids: list[int], **extra: Any
) -> dict[str, str]:
    """The metadata entry a hidden-state file carries (one JSON string).

    :param extra: further facts the producer records in the same entry (one
        entry: safetensors writes its metadata map in hash order, so a second
        entry would make a file's bytes differ from run to run).
    """
    record = {
        **extra,
        "verifier": str(verifier),
        "verifier_fingerprint": fingerprint,
        "target_layer_ids": list(target_layer_ids),
    }
    return {PROVENANCE_KEY: json.dumps(record, sort_keys=True)}


def read_provenance(path: str | Path) -> dict[str, Any] | None:
    """The provenance a hidden-state file records, or ``None`` when it has none.

    :raises safetensors.SafetensorError: the file is torn or not safetensors.
    """
    with safe_open(str(path), framework="pt") as handle:
        return provenance_of(handle.metadata())


def provenance_of(metadata: dict[str, str] | None) -> dict[str, Any] | None:
    """The provenance in a hidden-state file's metadata, or ``None``."""
    entry = (metadata or {}).get(PROVENANCE_KEY)
    return json.loads(entry) if entry else None
