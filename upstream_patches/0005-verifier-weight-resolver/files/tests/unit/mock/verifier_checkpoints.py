"""Tiny verifier checkpoints *with weights*, in the key layouts found on the Hub.

:func:`write_checkpoint` writes tensors as one file or as an indexed set of shards.
"""

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from tests.unit.mock import verifiers


def write_checkpoint(
    path: Path,
    tensors: dict[str, torch.Tensor],
    shards: list[list[str]] | None = None,
) -> None:
    """Write ``tensors`` as one file, or as an indexed set of shards.

    :param path: the checkpoint directory (its config.json is written elsewhere).
    :param tensors: all tensors, by key.
    :param shards: key groups, one per shard; keys not listed go to the last one.
    """
    path.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous().clone() for k, v in tensors.items()}
    if shards is None:
        save_file(tensors, str(path / "model.safetensors"))
        return
    groups = [list(group) for group in shards]
    listed = {key for group in groups for key in group}
    groups[-1].extend(key for key in tensors if key not in listed)
    weight_map: dict[str, str] = {}
    for i, group in enumerate(groups):
        name = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        save_file({key: tensors[key] for key in group}, str(path / name))
        weight_map.update(dict.fromkeys(group, name))
    (path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )


def minimal_llama_tensors(vocab: int = verifiers.VOCAB) -> dict[str, torch.Tensor]:
    """Just enough of a Llama checkpoint for the resolver (random values)."""
    hidden = verifiers.HIDDEN
    out = {
        "model.embed_tokens.weight": torch.randn(vocab, hidden),
        "lm_head.weight": torch.randn(verifiers.VOCAB, hidden),
        "model.norm.weight": torch.ones(hidden),
    }
    for i in range(verifiers.LAYERS):
        out[f"model.layers.{i}.input_layernorm.weight"] = torch.ones(hidden)
    return out


def llama_checkpoint(
    path: Path, tensors: dict[str, torch.Tensor], **config: object
) -> Path:
    """A Llama verifier directory holding ``tensors``, its config updated by
    ``config`` (e.g. other sizes)."""
    verifiers.llama(path)
    if config:
        data = json.loads((path / "config.json").read_text())
        data.update(config)
        (path / "config.json").write_text(json.dumps(data))
    write_checkpoint(path, tensors)
    return path


def with_second_decoder(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``tensors`` plus a copy of its ``model.`` decoder under ``other.model.``."""
    out = dict(tensors)
    for key, value in tensors.items():
        if key.startswith("model."):
            out["other." + key] = value.clone()
    return out
