"""Find and load the verifier's input embedding, output head and final norm.

The draft reuses three tensors of the verifier's text model: the input embedding,
the output head (LM head) and the final norm. :func:`resolve_verifier_weights`
finds their exact keys from the weight map (``model.safetensors.index.json`` or a
single ``model.safetensors``) and the safetensors headers only -- no tensor data
is read -- using the verifier's text config:

* the *decoder prefix* is the module path whose ``layers.<i>`` (``h.<i>``,
  ``blocks.<i>``) count matches ``num_hidden_layers`` (a DeepSeek-V3 MTP layer may
  add ``num_nextn_predict_layers``) and whose input embedding has shape
  ``[vocab_size, hidden_size]``; other towers (vision, audio, a talker) and
  per-layer copies (DeepSeek MTP ``layers.<N>.embed_tokens``/``shared_head``)
  never win;
* names match on dot boundaries only, within the naming families in
  :data:`EMBED_NAMES`, :data:`HEAD_NAMES` and :data:`NORM_NAMES`: the embedding and
  final norm are direct children of the decoder prefix, the head a direct child of
  the prefix or of its nearest ancestor that has one;
* a missing head means a tied head when the text config says so, else an error;
  a quantized head stored in a packed format is an error, never a substitute;
* several candidates, no candidate, shapes contradicting the config, missing or
  corrupt shards: :class:`VerifierWeightsError` naming every candidate and the
  override (``--verifier-weight-prefix``, ``--verifier-embed-key``,
  ``--verifier-head-key``, ``--verifier-norm-key``).

:func:`load_verifier_tensors` then reads only the shards holding those keys, and
only the selected head rows when a draft vocabulary is used.
"""

import concurrent.futures
import contextlib
import contextvars
import json
import math
import os
import re
import struct
import threading
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from loguru import logger
from transformers import PretrainedConfig

from speculators.utils.text_config import (
    config_from_dict,
    get_text_config,
    load_config_dict,
    text_config_dict,
    ties_word_embeddings,
)

__all__ = [
    "EMBED_NAMES",
    "HEAD_NAMES",
    "NORM_NAMES",
    "VERIFIER_WEIGHTS_FILENAME",
    "TensorInfo",
    "VerifierTensors",
    "VerifierWeightOverrides",
    "VerifierWeightSpec",
    "VerifierWeightsError",
    "build_verifier_norm",
    "current_verifier_weight_overrides",
    "has_nan",
    "load_verifier_norm",
    "load_verifier_tensors",
    "read_safetensors_header",
    "read_weight_index",
    "resolve_verifier_weights",
    "verifier_weight_overrides",
    "write_verifier_weights_record",
]

# Naming families, most common first. Matched as whole dotted components.
EMBED_NAMES: tuple[str, ...] = (
    "embed_tokens",
    "tok_embeddings",
    "word_embeddings",
    "wte",
    "embed_in",
    "embeddings",
    "embed",
)
HEAD_NAMES: tuple[str, ...] = (
    "lm_head",
    "output",
    "embed_out",
    "output_layer",
    "unembed",
)
NORM_NAMES: tuple[str, ...] = (
    "norm",
    "final_layernorm",
    "final_layer_norm",
    "norm_f",
    "ln_f",
)
LAYER_CONTAINERS: tuple[str, ...] = ("layers", "h", "blocks")

# Sibling tensor suffixes that mean "this weight is stored quantized / packed".
PACKED_SUFFIXES: tuple[str, ...] = (
    "weight_packed",
    "qweight",
    "weight_q",
    "weight_int4",
    "packed_weight",
)
FP8_DTYPES: frozenset[str] = frozenset({"F8_E4M3", "F8_E5M2"})
FLOAT_DTYPES: frozenset[str] = frozenset({"F16", "BF16", "F32", "F64"})
FP8_BLOCK = 128

# Final norms that apply ``x_norm * (1 + w)`` (see speculators.models.utils).
GEMMA_STYLE_MODEL_TYPES = frozenset(
    (
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3_text",
        "qwen3_5",
        "qwen3_5_text",
        "recurrent_gemma",
    )
)
# Norm module classes that already apply ``1 + w`` (weights are used as stored).
GEMMA_STYLE_NORM_CLASSES = frozenset(
    (
        "GemmaRMSNorm",
        "Gemma2RMSNorm",
        "Gemma3RMSNorm",
        "Qwen3_5RMSNorm",
        "RecurrentGemmaRMSNorm",
    )
)
# Final norms that are a LayerNorm (mean-centred), with or without a bias.
LAYERNORM_MODEL_TYPES = frozenset(
    (
        "gpt_neox",
        "falcon",
        "mpt",
        "gpt2",
        "gpt_bigcode",
        "gptj",
        "opt",
        "bloom",
        "phi",
        "stablelm",
        "starcoder2",
        "cohere",
    )
)

INDEX_FILENAME = "model.safetensors.index.json"
SINGLE_FILENAME = "model.safetensors"
VERIFIER_WEIGHTS_FILENAME = "verifier_weights.json"
OVERRIDE_HINT = (
    "Choose with --verifier-weight-prefix <prefix> (train config: "
    "verifier.verifier_weight_prefix) or name the tensors with "
    "--verifier-embed-key / --verifier-head-key / --verifier-norm-key."
)
_MAX_HEADER_BYTES = 100 * 1024 * 1024
_HEADER_LENGTH_BYTES = 8


class VerifierWeightsError(ValueError):
    """The verifier's embedding, head or final norm cannot be found or loaded."""


@dataclass(frozen=True)
class TensorInfo:
    """A tensor as its safetensors header describes it."""

    key: str
    shape: tuple[int, ...]
    dtype: str
    shard: str

    def describe(self) -> str:
        shape = list(self.shape)
        return f"'{self.key}' shape={shape} dtype={self.dtype} ({self.shard})"


@dataclass(frozen=True)
class VerifierWeightOverrides:
    """User choices that bypass the search (all optional)."""

    prefix: str | None = None
    embed_key: str | None = None
    head_key: str | None = None
    norm_key: str | None = None

    def as_kwargs(self) -> dict[str, str | None]:
        return {
            "prefix": self.prefix,
            "embed_key": self.embed_key,
            "head_key": self.head_key,
            "norm_key": self.norm_key,
        }


@dataclass
class VerifierWeightSpec:
    """The resolved keys of a verifier's embedding, head and final norm."""

    source: str
    prefix: str | None
    vocab_size: int
    hidden_size: int
    model_type: str
    embed: TensorInfo
    head: TensorInfo
    tied: bool
    norm: TensorInfo | None
    norm_bias: TensorInfo | None = None
    norm_kind: str = "rms"
    norm_eps: float = 1e-6
    head_scale: TensorInfo | None = None
    quantization: str | None = None
    shards: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record (written next to saved checkpoints)."""
        record = asdict(self)
        for name in ("embed", "head", "norm", "norm_bias", "head_scale"):
            if record[name] is not None:
                record[name]["shape"] = list(record[name]["shape"])
        record["overrides"] = {
            "verifier_weight_prefix": self.prefix,
            "verifier_embed_key": self.embed.key,
            "verifier_head_key": self.head.key,
            "verifier_norm_key": self.norm.key if self.norm else None,
        }
        return record


@dataclass
class VerifierTensors:
    """Loaded tensors; ``head`` holds only the requested rows when any were."""

    embed: torch.Tensor | None
    head: torch.Tensor
    norm_weight: torch.Tensor | None
    norm_bias: torch.Tensor | None


# --------------------------------------------------------------------- overrides

_OVERRIDES: contextvars.ContextVar[VerifierWeightOverrides | None] = (
    contextvars.ContextVar("verifier_weight_overrides", default=None)
)


@contextlib.contextmanager
def verifier_weight_overrides(
    prefix: str | None = None,
    embed_key: str | None = None,
    head_key: str | None = None,
    norm_key: str | None = None,
) -> Iterator[VerifierWeightOverrides]:
    """Apply overrides to every ``load_verifier_weights()`` inside the block.

    :param prefix: the decoder prefix (e.g. ``"language_model.model"``).
    :param embed_key: the exact key of the input embedding.
    :param head_key: the exact key of the output head.
    :param norm_key: the exact key of the final norm weight.
    """
    overrides = VerifierWeightOverrides(prefix, embed_key, head_key, norm_key)
    token = _OVERRIDES.set(overrides)
    try:
        yield overrides
    finally:
        _OVERRIDES.reset(token)


def current_verifier_weight_overrides() -> VerifierWeightOverrides:
    """The overrides set by the innermost :func:`verifier_weight_overrides`."""
    return _OVERRIDES.get() or VerifierWeightOverrides()


# ----------------------------------------------------------------- file access


def _is_local(name_or_path: str | Path) -> bool:
    return Path(name_or_path).is_dir()


def _resolve_file(
    name_or_path: str | Path, filename: str, revision: str | None = None
) -> Path:
    if _is_local(name_or_path):
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


def _cached_hub_file(
    name_or_path: str | Path, filename: str, revision: str | None
) -> Path | None:
    """A Hub file already in the local cache (no request made), else None."""
    from huggingface_hub import try_to_load_from_cache  # noqa: PLC0415

    found = try_to_load_from_cache(str(name_or_path), filename, revision=revision)
    return Path(found) if isinstance(found, str) else None


def read_safetensors_header(path: str | Path) -> dict[str, dict[str, Any]]:
    """Parse a safetensors header (8-byte length + JSON) without reading data.

    :param path: the ``.safetensors`` file.
    :returns: ``{key: {"dtype", "shape", "data_offsets"}}`` (metadata dropped).
    :raises VerifierWeightsError: when the file is missing, truncated or corrupt.
    """
    path = Path(path)
    if not path.is_file():
        raise VerifierWeightsError(f"Verifier shard file missing: {path}.")
    size = path.stat().st_size
    with path.open("rb") as file:
        head = file.read(_HEADER_LENGTH_BYTES)
        if len(head) < _HEADER_LENGTH_BYTES:
            raise VerifierWeightsError(
                f"Corrupt safetensors file {path}: {size} bytes, too short for a "
                "header. Re-download it."
            )
        (length,) = struct.unpack("<Q", head)
        if length > _MAX_HEADER_BYTES or 8 + length > size:
            raise VerifierWeightsError(
                f"Corrupt or truncated safetensors file {path}: header claims "
                f"{length} bytes, file has {size}. Re-download it."
            )
        raw = file.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise VerifierWeightsError(
            f"Corrupt safetensors header in {path}: {err}. Re-download it."
        ) from err
    if not isinstance(header, dict):
        raise VerifierWeightsError(f"Corrupt safetensors header in {path}.")
    header.pop("__metadata__", None)
    data_size = size - 8 - length
    for key, entry in header.items():
        try:
            start, end = entry["data_offsets"]
            shape = [int(dim) for dim in entry["shape"]]
            str(entry["dtype"])
        except (KeyError, TypeError, ValueError) as err:
            raise VerifierWeightsError(
                f"Corrupt safetensors header in {path}: bad entry for '{key}'."
            ) from err
        if end > data_size or start > end or any(dim < 0 for dim in shape):
            raise VerifierWeightsError(
                f"Truncated safetensors file {path}: '{key}' ends at byte {end} of "
                f"a {data_size}-byte data section. Re-download it."
            )
    return header


def read_weight_index(
    name_or_path: str | Path, revision: str | None = None
) -> dict[str, str]:
    """The weight map ``{key: shard file}`` of a checkpoint.

    :param name_or_path: a local directory or a Hub model id.
    :param revision: the Hub revision.
    :returns: the weight map (a single-file checkpoint maps to ``model.safetensors``).
    """
    if _is_local(name_or_path):
        directory = Path(name_or_path)
        index = directory / INDEX_FILENAME
        if index.is_file():
            return _parse_index(index)
        single = directory / SINGLE_FILENAME
        if single.is_file():
            return dict.fromkeys(read_safetensors_header(single), SINGLE_FILENAME)
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
        return dict.fromkeys(
            _hub_headers(name_or_path, revision).get(SINGLE_FILENAME, {}),
            SINGLE_FILENAME,
        )
    return _parse_index(Path(index_file))


def _parse_index(index: Path) -> dict[str, str]:
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise VerifierWeightsError(f"Corrupt weight index {index}: {err}.") from err
    if not isinstance(weight_map, dict):
        raise VerifierWeightsError(f"Corrupt weight index {index}: no weight_map.")
    return {str(key): str(shard) for key, shard in weight_map.items()}


def _hub_headers(
    name_or_path: str | Path, revision: str | None
) -> dict[str, dict[str, dict[str, Any]]]:
    """Headers of every shard of a Hub repo, fetched with range requests."""
    from huggingface_hub import HfApi  # noqa: PLC0415
    from huggingface_hub.errors import (  # noqa: PLC0415
        EntryNotFoundError,
        OfflineModeIsEnabled,
    )

    try:
        metadata = HfApi().get_safetensors_metadata(
            str(name_or_path), revision=revision
        )
    except EntryNotFoundError as err:
        response = getattr(err, "response", None)
        url = str(getattr(response, "url", "")) or str(err)
        raise _missing_hub_shard(name_or_path, url.rsplit("/", 1)[-1], err) from err
    except OfflineModeIsEnabled as err:
        raise VerifierWeightsError(
            f"HF_HUB_OFFLINE is set and shards of {name_or_path} whose headers are "
            "needed are not in the Hugging Face cache. Download the checkpoint once "
            "online (or pass a local directory)."
        ) from err
    return {
        shard: {
            key: {"dtype": info.dtype, "shape": list(info.shape)}
            for key, info in file_meta.tensors.items()
        }
        for shard, file_meta in metadata.files_metadata.items()
    }


class _Headers:
    """Lazily read safetensors headers, one shard at a time."""

    def __init__(
        self,
        name_or_path: str | Path,
        weight_map: Mapping[str, str],
        revision: str | None,
    ):
        self.name_or_path = name_or_path
        self.weight_map = weight_map
        self.revision = revision
        self._cache: dict[str, dict[str, dict[str, Any]]] = {}
        self._hub: dict[str, dict[str, dict[str, Any]]] | None = None

    def shard_header(self, shard: str) -> dict[str, dict[str, Any]]:
        if shard not in self._cache:
            if _is_local(self.name_or_path):
                self._cache[shard] = read_safetensors_header(
                    _resolve_file(self.name_or_path, shard)
                )
            elif cached := _cached_hub_file(self.name_or_path, shard, self.revision):
                self._cache[shard] = read_safetensors_header(cached)
            else:
                if self._hub is None:
                    self._hub = _hub_headers(self.name_or_path, self.revision)
                self._cache[shard] = self._hub.get(shard, {})
        return self._cache[shard]

    def info(self, key: str) -> TensorInfo:
        shard = self.weight_map[key]
        entry = self.shard_header(shard).get(key)
        if entry is None:
            raise VerifierWeightsError(
                f"The weight index of {self.name_or_path} maps '{key}' to {shard}, "
                f"but {shard} has no tensor '{key}'. The index and shards disagree; "
                "re-download the checkpoint."
            )
        return TensorInfo(key, tuple(entry["shape"]), str(entry["dtype"]), shard)


# ------------------------------------------------------------------ resolution


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _ancestors(prefix: str) -> list[str]:
    """``prefix`` and every enclosing module path, nearest first, ending at ""."""
    parts = prefix.split(".") if prefix else []
    return [".".join(parts[:i]) for i in range(len(parts), -1, -1)]


def _layer_prefixes(keys: list[str]) -> dict[str, set[int]]:
    """``{prefix: layer indices}`` for every ``<prefix>.<container>.<i>.`` seen."""
    found: dict[str, set[int]] = {}
    containers = "|".join(LAYER_CONTAINERS)
    pattern = re.compile(rf"(?:^|\.)(?:{containers})\.(\d+)\.")
    for key in keys:
        for match in pattern.finditer(key):
            found.setdefault(key[: match.start()], set()).add(int(match.group(1)))
    return found


def _children(
    weight_map: Mapping[str, str], scope: str, names: tuple[str, ...], leaf: str
) -> list[str]:
    return [
        key for name in names if (key := _join(scope, f"{name}.{leaf}")) in weight_map
    ]


def _nearest(
    weight_map: Mapping[str, str],
    scopes: list[str],
    names: tuple[str, ...],
    leaf: str = "weight",
) -> tuple[list[str], str | None]:
    for scope in scopes:
        found = _children(weight_map, scope, names, leaf)
        if found:
            return found, scope
    return [], None


def _packed_siblings(weight_map: Mapping[str, str], module: str) -> list[str]:
    return [
        key
        for suffix in PACKED_SUFFIXES
        if (key := _join(module, suffix)) in weight_map
    ]


def _int(config: PretrainedConfig, *names: str) -> int | None:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    return None


def _norm_eps(config: PretrainedConfig) -> float:
    for name in ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_eps"):
        value = getattr(config, name, None)
        if isinstance(value, int | float):
            return float(value)
    return 1e-6


def _load_configs(
    name_or_path: str | Path,
    text_config: PretrainedConfig | None,
    trust_remote_code: bool,
    revision: str | None,
) -> tuple[PretrainedConfig, bool, str]:
    config_dict = load_config_dict(name_or_path, revision=revision)
    if text_config is None:
        if trust_remote_code:
            from speculators.utils.text_config import (  # noqa: PLC0415
                load_text_config,
            )

            text_config = load_text_config(
                name_or_path, trust_remote_code=True, revision=revision
            )
        else:
            text_config = get_text_config(config_from_dict(config_dict))
    tied = getattr(text_config, "tie_word_embeddings", None)
    if tied is None:
        tied = ties_word_embeddings(config_dict)
    return text_config, bool(tied), _shape_hint(config_dict, text_config)


def _shape_hint(config_dict: dict[str, Any], text_config: PretrainedConfig) -> str:
    """The advice for weights that contradict the text config's sizes.

    When ``config.json`` does not set a size, the config class's default stands in
    for it; the weights are then right and the default is what to fix.
    """
    raw = text_config_dict(config_dict)
    unset = [
        f"{name} (so {type(text_config).__name__}'s default "
        f"{getattr(text_config, name)} was used)"
        for name in ("vocab_size", "hidden_size", "num_hidden_layers")
        if name not in raw and getattr(text_config, name, None) is not None
    ]
    if not unset:
        return OVERRIDE_HINT
    return (
        f"Its config.json does not set {' nor '.join(unset)}: add the value the "
        "weights have to the text config in config.json."
    )


def _layer_count_ok(indices: set[int], layers: int, extra: int) -> bool:
    if len(indices) == layers:
        return True
    return (
        extra > 0 and set(range(layers)) <= indices and len(indices) <= layers + extra
    )


def _overridden(what: str, key: str, flag: str, headers: _Headers) -> TensorInfo:
    """The tensor an override names, or an error listing keys of a similar name."""
    if key in headers.weight_map:
        return headers.info(key)
    leaf = key.rsplit(".", 2)[-2] if "." in key else key
    similar = sorted(k for k in headers.weight_map if f".{leaf}." in f".{k}")[:10]
    raise VerifierWeightsError(
        f"{flag} names '{key}' as the verifier {what}, but the checkpoint has no "
        f"such tensor. Keys with a similar name: {similar or 'none'}."
    )


def _check_shape(
    info: TensorInfo,
    expected: tuple[int, ...],
    what: str,
    source: str,
    hint: str = OVERRIDE_HINT,
) -> None:
    if tuple(info.shape) != expected:
        advice = (
            "Check that the text config matches the weights, or name the right "
            f"tensor. {hint}"
            if hint == OVERRIDE_HINT
            else hint
        )
        raise VerifierWeightsError(
            f"The verifier {what} {info.describe()} of {source} contradicts the "
            f"text config, which implies shape {list(expected)}. {advice}"
        )


def _find_prefix(  # noqa: C901, PLR0917
    weight_map: Mapping[str, str],
    headers: _Headers,
    layers: int,
    extra_layers: int,
    expected: tuple[int, int],
    source: str,
    hint: str = OVERRIDE_HINT,
) -> str:
    """The decoder prefix: matching layer count and embedding shape."""
    keys = list(weight_map)
    by_prefix = _layer_prefixes(keys)
    seen: list[str] = []
    matches: list[tuple[str, TensorInfo]] = []
    direct: list[tuple[str, TensorInfo]] = []
    for prefix in sorted(by_prefix):
        indices = by_prefix[prefix]
        embeds, scope = _nearest(weight_map, _ancestors(prefix), EMBED_NAMES)
        infos = [headers.info(key) for key in embeds]
        described = ", ".join(info.describe() for info in infos) or "no embedding"
        seen.append(f"prefix '{prefix}' ({len(indices)} layers; {described})")
        if not _layer_count_ok(indices, layers, extra_layers):
            continue
        good = [(prefix, info) for info in infos if tuple(info.shape) == expected]
        matches.extend(good)
        if scope == prefix:
            direct.extend(good)
    if len(matches) > 1 and direct:
        # An embedding that is the decoder's own child beats one found further up.
        matches = direct
    if not by_prefix:
        # Partial checkpoints (no decoder layers): an embedding of the right shape.
        for key in keys:
            parts = key.split(".")
            if parts[-1] == "weight" and parts[-2:-1] and parts[-2] in EMBED_NAMES:
                info = headers.info(key)
                scope = ".".join(parts[:-2])
                seen.append(f"{info.describe()}")
                if tuple(info.shape) == expected and not re.search(
                    rf"(?:^|\.)(?:{'|'.join(LAYER_CONTAINERS)})\.\d+(?:\.|$)",
                    scope,
                ):
                    matches.append((scope, info))
    if len(matches) == 1:
        return matches[0][0]
    if not matches:
        raise VerifierWeightsError(
            f"No decoder in {source} has {layers} layers and an input embedding of "
            f"shape {list(expected)} (the text config's num_hidden_layers, "
            f"vocab_size and hidden_size). Seen: {'; '.join(seen) or 'nothing'}. "
            f"{hint}"
        )
    listed = "; ".join(f"prefix '{p}': {info.describe()}" for p, info in matches)
    raise VerifierWeightsError(
        f"Ambiguous verifier decoder in {source}: {len(matches)} candidates match "
        f"the text config: {listed}. {OVERRIDE_HINT}"
    )


def _pick(
    found: list[str], headers: _Headers, what: str, source: str
) -> TensorInfo | None:
    if not found:
        return None
    if len(found) > 1:
        listed = "; ".join(headers.info(key).describe() for key in found)
        raise VerifierWeightsError(
            f"Ambiguous verifier {what} in {source}: {listed}. {OVERRIDE_HINT}"
        )
    return headers.info(found[0])


def resolve_verifier_weights(  # noqa: C901
    name_or_path: str | Path,
    *,
    text_config: PretrainedConfig | None = None,
    prefix: str | None = None,
    embed_key: str | None = None,
    head_key: str | None = None,
    norm_key: str | None = None,
    need_norm: bool = True,
    trust_remote_code: bool = False,
    revision: str | None = None,
) -> VerifierWeightSpec:
    """Find the exact keys of the verifier's embedding, output head and final norm.

    Only the weight map and safetensors headers are read (see module docstring).

    :param name_or_path: a local checkpoint directory or a Hub model id.
    :param text_config: the verifier's text config; read from ``config.json``
        (as data) when omitted.
    :param prefix: the decoder prefix, bypassing the prefix search.
    :param embed_key: the exact key of the input embedding.
    :param head_key: the exact key of the output head.
    :param norm_key: the exact key of the final norm weight.
    :param need_norm: whether a missing final norm is an error.
    :param trust_remote_code: load the config with the checkpoint's code.
    :param revision: the Hub revision.
    :returns: the resolved keys, shapes, dtypes and shards.
    :raises VerifierWeightsError: on ambiguity, absence, contradicting shapes,
        unsupported formats, and missing or corrupt shards.
    """
    source = str(name_or_path)
    text_config, tied_config, shape_hint = _load_configs(
        name_or_path, text_config, trust_remote_code, revision
    )
    vocab = _int(text_config, "vocab_size")
    hidden = _int(text_config, "hidden_size")
    layers = _int(text_config, "num_hidden_layers")
    if vocab is None or hidden is None or layers is None:
        raise VerifierWeightsError(
            f"The text config of {source} lacks vocab_size / hidden_size / "
            "num_hidden_layers; cannot identify the verifier's weights."
        )
    extra_layers = _int(text_config, "num_nextn_predict_layers") or 0
    model_type = str(getattr(text_config, "model_type", "") or "").lower()
    weight_map = read_weight_index(name_or_path, revision)
    headers = _Headers(name_or_path, weight_map, revision)
    expected = (vocab, hidden)
    notes: list[str] = []

    if prefix is not None:
        prefix = prefix.strip(".")
        if not any(k.startswith(f"{prefix}.") or not prefix for k in weight_map):
            raise VerifierWeightsError(
                f"--verifier-weight-prefix '{prefix}' matches no key of {source}."
            )
    elif embed_key is not None and embed_key in weight_map:
        # The embedding's module path anchors the search for head and norm.
        prefix = ".".join(embed_key.split(".")[:-2])
    elif embed_key is None:
        prefix = _find_prefix(
            weight_map, headers, layers, extra_layers, expected, source, shape_hint
        )
    scopes = _ancestors(prefix) if prefix is not None else [""]

    # Input embedding.
    if embed_key is not None:
        embed = _overridden(
            "input embedding", embed_key, "--verifier-embed-key", headers
        )
    else:
        found, _ = _nearest(weight_map, scopes, EMBED_NAMES)
        picked = _pick(found, headers, "input embedding", source)
        if picked is None:
            raise VerifierWeightsError(
                f"No input embedding ({'/'.join(EMBED_NAMES)}) under prefix "
                f"'{prefix}' of {source}. {OVERRIDE_HINT}"
            )
        embed = picked
    _check_shape(embed, expected, "input embedding", source, shape_hint)
    if embed.dtype not in FLOAT_DTYPES:
        raise VerifierWeightsError(
            f"The verifier input embedding {embed.describe()} is not stored as "
            "float16/bfloat16/float32; quantized embeddings are not supported."
        )

    # Output head.
    head_scale: TensorInfo | None = None
    quantization: str | None = None
    tied = False
    head: TensorInfo | None
    if head_key is not None:
        head = _overridden("output head", head_key, "--verifier-head-key", headers)
    else:
        found, _ = _nearest(weight_map, scopes, HEAD_NAMES)
        head = _pick(found, headers, "output head", source)
        if head is None:
            packed = [
                key
                for scope in scopes
                for name in HEAD_NAMES
                for key in _packed_siblings(weight_map, _join(scope, name))
            ]
            if packed:
                listed = "; ".join(headers.info(k).describe() for k in packed)
                raise VerifierWeightsError(
                    f"The verifier output head of {source} is stored in a packed "
                    f"quantized format ({listed}), which cannot be read; it is not "
                    "replaced by the input embedding. Use an unquantized (or FP8 "
                    "block-scaled) checkpoint of the same model, or pass "
                    "--verifier-head-key."
                )
            if not tied_config:
                raise VerifierWeightsError(
                    f"No output head ({'/'.join(HEAD_NAMES)}) found near prefix "
                    f"'{prefix}' of {source}, and its text config has "
                    "tie_word_embeddings=False. "
                    f"{OVERRIDE_HINT}"
                )
            head = embed
            tied = True
            notes.append("output head tied to the input embedding (text config)")
    _check_shape(head, expected, "output head", source, shape_hint)
    if head.dtype in FP8_DTYPES:
        module = head.key.rsplit(".", 1)[0]
        scale_key = _join(module, "weight_scale_inv")
        if scale_key not in weight_map:
            raise VerifierWeightsError(
                f"The verifier output head {head.describe()} is FP8 without a "
                f"block scale ('{scale_key}'); this format is not supported."
            )
        head_scale = headers.info(scale_key)
        blocks = (math.ceil(vocab / FP8_BLOCK), math.ceil(hidden / FP8_BLOCK))
        if tuple(head_scale.shape) != blocks:
            raise VerifierWeightsError(
                f"FP8 block scale {head_scale.describe()} does not match "
                f"{FP8_BLOCK}x{FP8_BLOCK} blocks of the head ({list(blocks)})."
            )
        quantization = f"fp8 ({head.dtype}, {FP8_BLOCK}x{FP8_BLOCK} block scales)"
    elif head.dtype not in FLOAT_DTYPES:
        raise VerifierWeightsError(
            f"The verifier output head {head.describe()} is stored as {head.dtype}, "
            "a quantized format that cannot be read; it is not replaced by the "
            "input embedding."
        )

    # Final norm.
    norm: TensorInfo | None = None
    norm_bias: TensorInfo | None = None
    if norm_key is not None:
        norm = _overridden("final norm", norm_key, "--verifier-norm-key", headers)
    else:
        norm_scopes = [prefix] if prefix is not None else [""]
        found, _ = _nearest(weight_map, norm_scopes, NORM_NAMES)
        norm = _pick(found, headers, "final norm", source)
    if norm is None and need_norm:
        raise VerifierWeightsError(
            f"No final norm ({'/'.join(NORM_NAMES)}) directly under prefix "
            f"'{prefix}' of {source}. {OVERRIDE_HINT}"
        )
    if norm is not None:
        _check_shape(norm, (hidden,), "final norm", source, shape_hint)
        bias_key = norm.key.rsplit(".", 1)[0] + ".bias"
        if bias_key in weight_map:
            norm_bias = headers.info(bias_key)
            _check_shape(norm_bias, (hidden,), "final norm bias", source, shape_hint)
    if norm_bias is not None or model_type in LAYERNORM_MODEL_TYPES:
        norm_kind = "layernorm"
    elif model_type in GEMMA_STYLE_MODEL_TYPES:
        norm_kind = "gemma_rms"
    else:
        norm_kind = "rms"

    used = [embed, head, norm, norm_bias, head_scale]
    shards = sorted({info.shard for info in used if info is not None})
    spec = VerifierWeightSpec(
        source=source,
        prefix=prefix,
        vocab_size=vocab,
        hidden_size=hidden,
        model_type=model_type,
        embed=embed,
        head=head,
        tied=tied,
        norm=norm,
        norm_bias=norm_bias,
        norm_kind=norm_kind,
        norm_eps=_norm_eps(text_config),
        head_scale=head_scale,
        quantization=quantization,
        shards=shards,
        notes=notes,
    )
    logger.info(
        "Verifier weights of {}: prefix={!r} embed={!r} head={!r}{} norm={!r} ({})",
        source,
        prefix,
        embed.key,
        head.key,
        " (tied)" if tied else "",
        norm.key if norm else None,
        norm_kind,
    )
    return spec


# --------------------------------------------------------------------- loading

# Tensors are read with plain file reads (no memory map: a map's page faults would
# add every touched page to the process RSS, and a copy into the destination would
# double it) in pieces of this size, each checked for NaN/inf while still in cache
# (1 MiB: the check then reads from L2).
_READ_CHUNK_BYTES = 1 << 20

_TORCH_DTYPES: dict[str, torch.dtype] = {
    "BF16": torch.bfloat16,
    "F16": torch.float16,
    "F32": torch.float32,
    "F64": torch.float64,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
}

# NaN/inf test on the bit patterns, with two read-only max reductions (no float
# conversion, no temporaries; numpy, vectorised): a value is NaN/inf iff its
# exponent bits are all ones, i.e. its bits, read as a signed integer, are at
# least ``threshold`` (positive NaN/+inf), or, read as unsigned, at least
# ``threshold | sign bit`` (negative NaN/-inf) -- both ranges top their views.
# FP8 E4M3 has no inf: its NaN is S.1111.111, the same test.
_NONFINITE_BITS: dict[torch.dtype, tuple[type, type, int, int]] = {
    torch.bfloat16: (np.int16, np.uint16, 0x7F80, 0xFF80),
    torch.float16: (np.int16, np.uint16, 0x7C00, 0xFC00),
    torch.float32: (np.int32, np.uint32, 0x7F80_0000, 0xFF80_0000),
    torch.float64: (
        np.int64,
        np.uint64,
        0x7FF0_0000_0000_0000,
        0xFFF0_0000_0000_0000,
    ),
    torch.float8_e4m3fn: (np.int8, np.uint8, 0x7F, 0xFF),
    torch.float8_e5m2: (np.int8, np.uint8, 0x7C, 0xFC),
}


def _nonfinite_error(key: str) -> VerifierWeightsError:
    return VerifierWeightsError(
        f"Verifier tensor '{key}' contains NaN or inf values; the checkpoint "
        "is corrupt or was saved incorrectly."
    )


def _bits_finite(raw: np.ndarray, dtype: torch.dtype) -> bool:
    """Whether the whole ``dtype`` elements in the uint8 array ``raw`` are finite."""
    bits = _NONFINITE_BITS.get(dtype)
    if bits is None or raw.size == 0:
        return True
    signed, unsigned, positive, negative = bits
    return (
        int(raw.view(signed).max()) < positive
        and int(raw.view(unsigned).max()) < negative
    )


def _check_finite(tensor: torch.Tensor, key: str) -> None:
    """Raise when ``tensor`` holds NaN/inf (checked in pieces: no big temps)."""
    if not tensor.is_floating_point() or tensor.numel() == 0:
        return
    if (
        tensor.dtype in _NONFINITE_BITS
        and tensor.device.type == "cpu"
        and tensor.is_contiguous()
    ):
        raw = tensor.detach().reshape(-1).view(torch.uint8).numpy()
        for start in range(0, raw.size, _READ_CHUNK_BYTES):
            if not _bits_finite(raw[start : start + _READ_CHUNK_BYTES], tensor.dtype):
                raise _nonfinite_error(key)
        return
    flat = tensor.reshape(-1)
    step = _READ_CHUNK_BYTES // tensor.element_size()
    for start in range(0, flat.numel(), step):
        if not bool(torch.isfinite(flat[start : start + step].float()).all()):
            raise _nonfinite_error(key)


def has_nan(tensor: torch.Tensor) -> bool:
    """``bool(tensor.isnan().any())``, in pieces, stopping at the first NaN.

    A draft's verifier-owned parameters start all-NaN ("not loaded yet"), so the
    first piece usually answers; no full-size boolean temporary is ever made (for
    a Kimi-sized float32 embedding that is 1.2 GB and seconds of work).

    :param tensor: any tensor; non-floating tensors have no NaN.
    :returns: whether ``tensor`` holds a NaN.
    """
    if not tensor.is_floating_point() or tensor.numel() == 0:
        return False
    flat = tensor.detach().reshape(-1)
    first = _NAN_PROBE_ELEMENTS
    if bool(flat[:first].isnan().any()):
        return True
    for start in range(first, flat.numel(), _NAN_PIECE_ELEMENTS):
        if bool(flat[start : start + _NAN_PIECE_ELEMENTS].isnan().any()):
            return True
    return False


# has_nan: a small first probe (the all-NaN case), then pieces that bound the
# boolean temporary without many small kernel launches on an accelerator.
_NAN_PROBE_ELEMENTS = 1 << 12
_NAN_PIECE_ELEMENTS = 1 << 24


def _dequantize_fp8(
    weight: torch.Tensor, scale_inv: torch.Tensor, rows: torch.Tensor | None
) -> torch.Tensor:
    """``weight`` (selected rows) times its 128x128 block scale, in float32."""
    row_ids = (
        rows if rows is not None else torch.arange(weight.shape[0], dtype=torch.long)
    )
    row_scale = scale_inv.float()[row_ids // FP8_BLOCK]
    col_scale = row_scale.repeat_interleave(FP8_BLOCK, dim=1)[:, : weight.shape[1]]
    return weight.float() * col_scale


def _row_runs(unique: torch.Tensor) -> list[tuple[int, int]]:
    """``[start, end)`` runs of consecutive ids in a sorted, unique id tensor."""
    breaks = torch.nonzero(unique[1:] - unique[:-1] != 1).flatten() + 1
    starts = torch.cat([unique[:1], unique[breaks]]).tolist()
    ends = (torch.cat([unique[breaks - 1], unique[-1:]]) + 1).tolist()
    return list(zip(starts, ends, strict=True))


class _Shard:
    """An open shard: plain positional file reads at header-given offsets."""

    def __init__(self, path: Path):
        self.path = path
        self.header = read_safetensors_header(path)
        try:
            self.file = path.open("rb", buffering=0)
        except OSError as err:
            raise VerifierWeightsError(
                f"Cannot open verifier shard {path}: {err}"
            ) from err
        (length,) = struct.unpack("<Q", self.file.read(_HEADER_LENGTH_BYTES))
        self.data_start = _HEADER_LENGTH_BYTES + length
        self._lock = threading.Lock()

    def close(self) -> None:
        self.file.close()

    def readable(self, key: str) -> bool:
        entry = self.header.get(key)
        return entry is not None and entry["dtype"] in _TORCH_DTYPES

    def read(  # noqa: C901
        self,
        key: str,
        *,
        rows: torch.Tensor | None = None,
        out: torch.Tensor | None = None,
        check: bool = True,
    ) -> torch.Tensor:
        """Read ``key`` -- or only its ``rows`` (sorted, unique) -- into ``out``.

        Without ``out`` a new tensor of the stored dtype is returned. With a CPU,
        contiguous ``out`` of the stored dtype the bytes land in ``out`` directly;
        otherwise each chunk passes through a chunk-sized buffer and is converted
        into ``out``. Either way no second full-size copy exists. Chunks are read
        (and checked for NaN/inf while in cache) by a few threads in parallel.
        """
        entry = self.header[key]
        dtype = _TORCH_DTYPES[entry["dtype"]]
        shape = tuple(int(dim) for dim in entry["shape"])
        start, end = (int(offset) for offset in entry["data_offsets"])
        item = torch.empty((), dtype=dtype).element_size()
        if end - start != math.prod(shape) * item:
            raise VerifierWeightsError(
                f"Corrupt safetensors header in {self.path}: '{key}' has "
                f"{end - start} bytes for shape {list(shape)} {entry['dtype']}. "
                "Re-download it."
            )
        base = self.data_start + start
        if rows is None:
            out_shape = shape
            runs = [(base, end - start)]
        else:
            if len(shape) < 1:
                raise VerifierWeightsError(f"Cannot select rows of scalar '{key}'.")
            row_bytes = math.prod(shape[1:]) * item
            out_shape = (rows.numel(), *shape[1:])
            runs = [
                (base + first * row_bytes, (last - first) * row_bytes)
                for first, last in (_row_runs(rows) if rows.numel() else [])
            ]
        if out is not None and tuple(out.shape) != out_shape:
            raise VerifierWeightsError(
                f"Destination for verifier tensor '{key}' has shape "
                f"{list(out.shape)}, expected {list(out_shape)}."
            )
        if out is not None and not out.is_contiguous():
            with torch.no_grad():
                out.copy_(self.read(key, rows=rows, check=check))
            return out
        target = torch.empty(out_shape, dtype=dtype) if out is None else out
        flat = target.detach().reshape(-1)
        direct = flat.dtype == dtype and flat.device.type == "cpu"
        raw = flat.view(torch.uint8).numpy() if direct else None
        local = threading.local()

        def run(pieces: list[tuple[int, int, int]], first: int, last: int) -> None:
            # pieces: (file offset, destination byte, bytes), filling [first, last)
            if raw is not None:
                chunk = raw[first:last]
            else:
                if getattr(local, "buffer", None) is None:
                    local.buffer = np.empty(_READ_CHUNK_BYTES, dtype=np.uint8)
                chunk = local.buffer[: last - first]
            view = memoryview(chunk)  # type: ignore[arg-type]
            for offset, at, size in pieces:
                self._pread(view[at - first : at - first + size], offset, key)
            if check and not _bits_finite(chunk, dtype):
                raise _nonfinite_error(key)
            if raw is None:
                with torch.no_grad():
                    flat[first // item : last // item].copy_(
                        torch.from_numpy(chunk).view(dtype)
                    )

        _run_parallel(run, _plan_chunks(runs))
        return target

    def _pread(self, view: memoryview, offset: int, key: str) -> None:
        done = 0
        while done < len(view):
            if _HAS_PREADV:
                got = os.preadv(self.file.fileno(), [view[done:]], offset + done)
            else:  # pragma: no cover - platforms without preadv
                with self._lock:
                    self.file.seek(offset + done)
                    got = self.file.readinto(view[done:]) or 0
            if not got:
                raise VerifierWeightsError(
                    f"Truncated verifier shard {self.path} while reading '{key}'."
                )
            done += got


_HAS_PREADV = hasattr(os, "preadv")


def _plan_chunks(
    runs: list[tuple[int, int]],
) -> list[tuple[list[tuple[int, int, int]], int, int]]:
    """Split ``(file offset, bytes)`` runs, laid out back to back in the
    destination, into chunks of at most ``_READ_CHUNK_BYTES`` destination bytes.
    """
    chunks: list[tuple[list[tuple[int, int, int]], int, int]] = []
    pieces: list[tuple[int, int, int]] = []
    first = pos = 0
    for offset, size in runs:
        done = 0
        while done < size:
            count = min(_READ_CHUNK_BYTES - (pos - first), size - done)
            pieces.append((offset + done, pos, count))
            pos += count
            done += count
            if pos - first == _READ_CHUNK_BYTES:
                chunks.append((pieces, first, pos))
                pieces, first = [], pos
    if pieces:
        chunks.append((pieces, first, pos))
    return chunks


def _run_parallel(function: Any, chunks: list[tuple[Any, ...]]) -> None:
    """``function(*chunk)`` for every chunk, on up to ``_READ_THREADS`` threads.

    File reads and numpy/torch work release the GIL, so the threads overlap. Each
    thread takes one contiguous run of chunks (its own part of the destination:
    no two threads fault pages in, or write, the same region).
    """
    workers = min(_READ_THREADS, len(chunks))
    if workers <= 1:
        for chunk in chunks:
            function(*chunk)
        return

    def run_part(part: list[tuple[Any, ...]]) -> None:
        for chunk in part:
            function(*chunk)

    bounds = [len(chunks) * worker // workers for worker in range(workers + 1)]
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futures = [
            pool.submit(run_part, chunks[bounds[worker] : bounds[worker + 1]])
            for worker in range(workers)
        ]
        for future in futures:
            future.result()


# Threads reading one tensor: reads are mostly kernel copies and page faults, so
# a few threads help even on few CPUs.
_READ_THREADS = 4


def _read_rows(
    shard: _Shard,
    info: TensorInfo,
    rows: torch.Tensor,
    out: torch.Tensor | None,
    check: bool,
) -> torch.Tensor:
    """Read only ``rows`` (any order, repeats allowed) of a 2-D tensor."""
    total = info.shape[0]
    if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= total):
        raise VerifierWeightsError(f"Row index out of range for '{info.key}'.")
    if bool((rows[1:] > rows[:-1]).all()):
        # Sorted and unique (e.g. from a draft-vocabulary mask): read in place.
        return shard.read(info.key, rows=rows, out=out, check=check)
    unique, inverse = torch.unique(rows, sorted=True, return_inverse=True)
    picked = shard.read(info.key, rows=unique, check=check)
    if out is None:
        return picked[inverse]
    with torch.no_grad():
        out.copy_(picked[inverse])
    return out


def _read_fallback(
    shard: _Shard, key: str, rows: torch.Tensor | None, out: torch.Tensor | None
) -> torch.Tensor:
    """Read a tensor of a dtype plain reads do not handle, through safetensors."""
    from safetensors import safe_open  # noqa: PLC0415

    try:
        handle_ctx = safe_open(str(shard.path), framework="pt", device="cpu")
    except Exception as err:
        raise VerifierWeightsError(
            f"Cannot open verifier shard {shard.path}: {err}"
        ) from err
    with handle_ctx as handle:
        tensor = handle.get_tensor(key)
        tensor = tensor[rows] if rows is not None else tensor.clone()
    if out is None:
        return tensor
    with torch.no_grad():
        out.copy_(tensor)
    return out


def load_verifier_tensors(  # noqa: C901
    spec: VerifierWeightSpec,
    *,
    head_rows: torch.Tensor | None = None,
    load_norm: bool = True,
    load_embed: bool = True,
    out: Mapping[str, torch.Tensor] | None = None,
    revision: str | None = None,
) -> VerifierTensors:
    """Load the resolved tensors, reading only the shards that hold them.

    Tensors are read with plain file reads (no memory map), each piece checked
    for NaN/inf as it arrives. Pass ``out`` to read straight into existing
    tensors (e.g. the draft's parameters): then only one copy of the embedding
    ever exists in memory.

    :param spec: the result of :func:`resolve_verifier_weights`.
    :param head_rows: target-vocabulary ids to keep from the head (a draft
        vocabulary: a bool mask over the vocabulary or a list of ids); only those
        rows are read. None keeps the full head.
    :param load_norm: whether to load the final norm.
    :param load_embed: whether to load the embedding (``embed`` is None if not).
    :param out: destinations by role, ``"embed"`` and/or ``"head"``: tensors of
        the loaded shape (the head's: ``[len(head_rows), hidden]``), any dtype
        and device; values are converted into them and they are returned as
        ``embed`` / ``head``.
    :param revision: the Hub revision.
    :returns: the tensors; an FP8 head comes back dequantized to float32 (or
        converted into ``out["head"]``).
    :raises VerifierWeightsError: on non-finite values (naming the key),
        unreadable or truncated shards, or a destination of the wrong shape.
    """
    destinations = dict(out or {})
    unknown = set(destinations) - {"embed", "head"}
    if unknown:
        raise ValueError(f"Unknown destination roles {sorted(unknown)}.")
    rows: torch.Tensor | None = None
    if head_rows is not None:
        if head_rows.dtype == torch.bool:
            rows = torch.nonzero(head_rows.cpu(), as_tuple=False).flatten()
        else:
            rows = head_rows.cpu().to(torch.long).flatten()
    shards: dict[str, _Shard] = {}

    def shard_of(info: TensorInfo) -> _Shard:
        if info.shard not in shards:
            shards[info.shard] = _Shard(
                Path(_resolve_file(spec.source, info.shard, revision))
            )
        return shards[info.shard]

    def read(
        info: TensorInfo,
        *,
        rows: torch.Tensor | None = None,
        dest: torch.Tensor | None = None,
        check: bool = True,
    ) -> torch.Tensor:
        shard = shard_of(info)
        if not shard.readable(info.key):
            tensor = _read_fallback(shard, info.key, rows, dest)
            if check:
                _check_finite(tensor, info.key)
            return tensor
        if rows is not None:
            return _read_rows(shard, info, rows, dest, check)
        return shard.read(info.key, out=dest, check=check)

    try:
        embed = None
        if load_embed:
            embed = read(spec.embed, dest=destinations.get("embed"))
        head_dest = destinations.get("head")
        fp8 = spec.head_scale is not None
        if (
            not fp8
            and rows is None
            and head_dest is None
            and spec.head.key == spec.embed.key
            and embed is not None
            and embed.dtype == _TORCH_DTYPES.get(spec.embed.dtype)
        ):
            head = embed  # tied, full head: the embedding as loaded
        elif spec.head_scale is not None:
            weight = read(spec.head, rows=rows, check=False)
            scale = read(spec.head_scale)
            head = _dequantize_fp8(weight, scale, rows)
            del weight
            _check_finite(head, spec.head.key)
            if head_dest is not None:
                with torch.no_grad():
                    head = head_dest.copy_(head)
        else:
            # Tied heads with selected rows read those rows of the embedding key.
            head = read(spec.head, rows=rows, dest=head_dest)
        norm_weight = norm_bias = None
        if load_norm:
            if spec.norm is not None:
                norm_weight = read(spec.norm)
            if spec.norm_bias is not None:
                norm_bias = read(spec.norm_bias)
    finally:
        for shard in shards.values():
            shard.close()
    return VerifierTensors(embed, head, norm_weight, norm_bias)


# ------------------------------------------------------------------- final norm


class _VerifierLayerNorm(torch.nn.LayerNorm):
    """A frozen LayerNorm standing in for a LayerNorm-family verifier norm."""


def build_verifier_norm(spec: VerifierWeightSpec) -> torch.nn.Module:
    """A module computing the verifier's final norm, for ``spec.norm_kind``.

    :param spec: the resolved spec.
    :returns: an RMSNorm (``x * w``; Gemma-style weights are converted by
        :func:`load_verifier_norm`) or a LayerNorm.
    """
    if spec.norm_kind == "layernorm":
        return _VerifierLayerNorm(
            spec.hidden_size, eps=spec.norm_eps, bias=spec.norm_bias is not None
        )
    from transformers.models.qwen3.modeling_qwen3 import (  # noqa: PLC0415
        Qwen3RMSNorm,
    )

    return Qwen3RMSNorm(spec.hidden_size, eps=spec.norm_eps)


def load_verifier_norm(
    owner: torch.nn.Module,
    spec: VerifierWeightSpec,
    tensors: VerifierTensors,
    attribute: str = "verifier_norm",
) -> None:
    """Make ``owner.<attribute>(h)`` equal the verifier's final norm of ``h``.

    An RMSNorm of the plain convention (``x * w``) gets ``w' = 1 + w`` (computed
    in float32, then cast to the module's dtype) when the verifier's norm is
    Gemma-style (``x * (1 + w)``); a Gemma-style module gets ``w`` as stored. A
    LayerNorm-family verifier norm replaces the module with a LayerNorm.

    :param owner: the draft model.
    :param spec: the resolved spec.
    :param tensors: the loaded tensors (with ``norm_weight``).
    :param attribute: the norm module's attribute name.
    """
    if tensors.norm_weight is None:
        return
    module = getattr(owner, attribute)
    if spec.norm_kind == "layernorm":
        if not isinstance(module, torch.nn.LayerNorm):
            module = build_verifier_norm(spec).to(
                device=module.weight.device, dtype=module.weight.dtype
            )
            setattr(owner, attribute, module)
            _ignore_on_save(owner, f"{attribute}.bias")
        with torch.no_grad():
            module.weight.copy_(tensors.norm_weight)
            if module.bias is not None and tensors.norm_bias is not None:
                module.bias.copy_(tensors.norm_bias)
        for param in module.parameters():
            param.requires_grad_(False)
        return
    weight = tensors.norm_weight
    gemma_module = type(module).__name__ in GEMMA_STYLE_NORM_CLASSES
    if spec.norm_kind == "gemma_rms" and not gemma_module:
        weight = 1.0 + weight.float()
    elif spec.norm_kind != "gemma_rms" and gemma_module:
        weight = weight.float() - 1.0
    with torch.no_grad():
        module.weight.copy_(weight.to(module.weight.dtype))
    module.weight.requires_grad_(False)


def _ignore_on_save(owner: torch.nn.Module, key: str) -> None:
    for name in ("_keys_to_ignore_on_save", "_keys_to_ignore_on_load_missing"):
        current = list(getattr(owner, name, None) or [])
        if key not in current:
            owner.__dict__[name] = [*current, key]


def write_verifier_weights_record(model: Any, directory: str | Path) -> Path | None:
    """Write the resolved verifier keys next to a saved checkpoint.

    :param model: the (possibly wrapped) draft model.
    :param directory: the checkpoint directory.
    :returns: the written file, or None when the model has no resolution.
    """
    record = getattr(model, "verifier_weight_resolution", None)
    if record is None:
        inner = getattr(model, "module", None)
        record = getattr(inner, "verifier_weight_resolution", None)
    if record is None:
        return None
    path = Path(directory) / VERIFIER_WEIGHTS_FILENAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path
