"""Checkpoint file access: the weight map and tensor metadata, local or on the Hub.

Tensor metadata comes from ``safetensors`` (local files and files already in the
Hugging Face cache) or from ``huggingface_hub``'s range requests (other Hub
files), one shard at a time and only for the shards a lookup needs.
"""

import json
from collections.abc import Mapping
from pathlib import Path

from safetensors import SafetensorError, safe_open

from speculators.utils.verifier_weights.spec import TensorInfo, VerifierWeightsError

__all__ = [
    "INDEX_FILENAME",
    "SINGLE_FILENAME",
    "TensorHeaders",
    "is_local",
    "read_shard_metadata",
    "read_weight_index",
    "resolve_checkpoint_file",
]

INDEX_FILENAME = "model.safetensors.index.json"
SINGLE_FILENAME = "model.safetensors"

# {key: (shape, safetensors dtype)}
ShardMetadata = dict[str, tuple[tuple[int, ...], str]]


def is_local(name_or_path: str | Path) -> bool:
    """:return: whether ``name_or_path`` is a local checkpoint directory."""
    return Path(name_or_path).is_dir()


def resolve_checkpoint_file(
    name_or_path: str | Path, filename: str, revision: str | None = None
) -> Path:
    """The local path of one checkpoint file, downloading it from the Hub if needed.

    :param name_or_path: a local checkpoint directory or a Hub model id.
    :param filename: the file inside the checkpoint.
    :param revision: the Hub revision.
    :return: the file's local path.
    :raises VerifierWeightsError: when the file is missing locally, on the Hub, or
        (offline) in the cache.
    """
    if is_local(name_or_path):
        path = Path(name_or_path) / filename
        if not path.is_file():
            raise VerifierWeightsError(
                f"Verifier shard file missing: {path} (named by the weight map of "
                f"{name_or_path}). Re-download the checkpoint or fix its index."
            )
        return path
    from huggingface_hub import hf_hub_download  # noqa: PLC0415
    from huggingface_hub.errors import (  # noqa: PLC0415
        EntryNotFoundError,
        LocalEntryNotFoundError,
    )

    try:
        return Path(
            hf_hub_download(
                repo_id=str(name_or_path), filename=filename, revision=revision
            )
        )
    except LocalEntryNotFoundError as err:
        raise VerifierWeightsError(
            f"Verifier shard {filename} of {name_or_path} is not in the Hugging "
            f"Face cache and the Hub cannot be used ({err}). Download the "
            "checkpoint once online, or pass a local directory."
        ) from err
    except EntryNotFoundError as err:
        raise _missing_hub_shard(name_or_path, filename, err) from err


def _missing_hub_shard(
    name_or_path: str | Path, filename: str, err: Exception
) -> VerifierWeightsError:
    return VerifierWeightsError(
        f"Verifier shard file missing: {filename} (named by the weight map of "
        f"{name_or_path}) is not in the Hub repo ({err}). Fix the repo's index or "
        "choose another revision."
    )


def read_shard_metadata(path: str | Path) -> ShardMetadata:
    """Shapes and dtypes of every tensor in a local safetensors file.

    :param path: the ``.safetensors`` file.
    :return: ``{key: (shape, dtype)}``; no tensor data is read.
    :raises VerifierWeightsError: when the file is missing, truncated or corrupt.
    """
    path = Path(path)
    if not path.is_file():
        raise VerifierWeightsError(f"Verifier shard file missing: {path}.")
    try:
        with safe_open(str(path), framework="pt") as handle:
            slices = {key: handle.get_slice(key) for key in handle.keys()}  # noqa: SIM118
            return {
                key: (tuple(piece.get_shape()), piece.get_dtype())
                for key, piece in slices.items()
            }
    except (SafetensorError, OSError) as err:
        raise VerifierWeightsError(
            f"Corrupt or truncated safetensors file {path} ({err}). Re-download it."
        ) from err


def read_weight_index(
    name_or_path: str | Path, revision: str | None = None
) -> dict[str, str]:
    """The weight map ``{key: shard file}`` of a checkpoint.

    :param name_or_path: a local directory or a Hub model id.
    :param revision: the Hub revision.
    :return: the weight map (a single-file checkpoint maps to ``model.safetensors``).
    :raises VerifierWeightsError: when there are no safetensors weights, or the
        index is corrupt.
    """
    if is_local(name_or_path):
        directory = Path(name_or_path)
        index = directory / INDEX_FILENAME
        if index.is_file():
            return _parse_index(index)
        single = directory / SINGLE_FILENAME
        if single.is_file():
            return dict.fromkeys(read_shard_metadata(single), SINGLE_FILENAME)
        raise VerifierWeightsError(
            f"No safetensors weights in {directory}: expected {INDEX_FILENAME} or "
            f"{SINGLE_FILENAME}."
        )
    from huggingface_hub import hf_hub_download  # noqa: PLC0415
    from huggingface_hub.errors import EntryNotFoundError  # noqa: PLC0415

    try:
        index_file = hf_hub_download(
            repo_id=str(name_or_path), filename=INDEX_FILENAME, revision=revision
        )
    except EntryNotFoundError:
        metadata = _hub_shard_metadata(name_or_path, SINGLE_FILENAME, revision)
        return dict.fromkeys(metadata, SINGLE_FILENAME)
    return _parse_index(Path(index_file))


def _parse_index(index: Path) -> dict[str, str]:
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise VerifierWeightsError(f"Corrupt weight index {index}: {err}.") from err
    if not isinstance(weight_map, dict):
        raise VerifierWeightsError(f"Corrupt weight index {index}: no weight_map.")
    return {str(key): str(shard) for key, shard in weight_map.items()}


def _cached_hub_file(
    name_or_path: str | Path, filename: str, revision: str | None
) -> Path | None:
    """A Hub file already in the local cache (no request made), else None."""
    from huggingface_hub import try_to_load_from_cache  # noqa: PLC0415

    found = try_to_load_from_cache(str(name_or_path), filename, revision=revision)
    return Path(found) if isinstance(found, str) else None


def _hub_shard_metadata(
    name_or_path: str | Path, shard: str, revision: str | None
) -> ShardMetadata:
    """One Hub shard's tensor metadata: from the cache, else by range requests."""
    if cached := _cached_hub_file(name_or_path, shard, revision):
        return read_shard_metadata(cached)
    from huggingface_hub import HfApi  # noqa: PLC0415
    from huggingface_hub.errors import (  # noqa: PLC0415
        EntryNotFoundError,
        OfflineModeIsEnabled,
    )

    try:
        metadata = HfApi().parse_safetensors_file_metadata(
            str(name_or_path), shard, revision=revision
        )
    except EntryNotFoundError as err:
        raise _missing_hub_shard(name_or_path, shard, err) from err
    except OfflineModeIsEnabled as err:
        raise VerifierWeightsError(
            f"HF_HUB_OFFLINE is set and shard {shard} of {name_or_path}, whose "
            "header is needed, is not in the Hugging Face cache. Download the "
            "checkpoint once online (or pass a local directory)."
        ) from err
    return {
        key: (tuple(info.shape), str(info.dtype))
        for key, info in metadata.tensors.items()
    }


class TensorHeaders:
    """Tensor metadata by key, read lazily one shard at a time."""

    def __init__(
        self,
        name_or_path: str | Path,
        weight_map: Mapping[str, str],
        revision: str | None = None,
    ):
        self.name_or_path = name_or_path
        self.weight_map = weight_map
        self.revision = revision
        self._shards: dict[str, ShardMetadata] = {}

    def shard(self, shard: str) -> ShardMetadata:
        """:return: the metadata of every tensor in ``shard``."""
        if shard not in self._shards:
            if is_local(self.name_or_path):
                self._shards[shard] = read_shard_metadata(
                    resolve_checkpoint_file(self.name_or_path, shard)
                )
            else:
                self._shards[shard] = _hub_shard_metadata(
                    self.name_or_path, shard, self.revision
                )
        return self._shards[shard]

    def info(self, key: str) -> TensorInfo:
        """:return: the shape, dtype and shard of ``key`` (in the weight map)."""
        shard = self.weight_map[key]
        entry = self.shard(shard).get(key)
        if entry is None:
            raise VerifierWeightsError(
                f"The weight index of {self.name_or_path} maps '{key}' to {shard}, "
                f"but {shard} has no tensor '{key}'. The index and shards disagree; "
                "re-download the checkpoint."
            )
        shape, dtype = entry
        return TensorInfo(key, shape, dtype, shard)
