"""Writing tiny checkpoints: safetensors (one file or shards + index), remote code,
header-level skeletons, and the norm perturbation that makes a wrong norm show.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

__all__ = [
    "TinyCheckpoint",
    "perturb_norms",
    "remote_code",
    "save_pretrained",
    "saved_keys",
    "write_checkpoint",
    "write_config",
    "write_skeleton",
]


@dataclass
class TinyCheckpoint:
    """A written verifier and the instantiated model it was written from.

    ``model`` is the text path with its output head (for logits), ``norm`` the
    final norm module that model applies; ``marker`` is written if (and only if)
    code shipped in the checkpoint was imported.
    """

    path: Path
    model: Any
    norm: torch.nn.Module
    marker: Path | None = None


def write_config(path: Path, config: Mapping[str, Any]) -> None:
    """``config.json`` (indented, newline-terminated)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def _own(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Contiguous tensors, each with storage of its own (safetensors refuses shared
    storage: tied weights); copies only where storage is shared."""
    seen: set[int] = set()
    owned: dict[str, torch.Tensor] = {}
    for key, value in tensors.items():
        value = value.detach().contiguous()
        ptr = value.untyped_storage().data_ptr()
        if ptr in seen or value.untyped_storage().nbytes() != value.nbytes:
            value = value.clone()
        seen.add(value.untyped_storage().data_ptr())
        owned[key] = value
    return owned


def write_checkpoint(
    path: Path,
    tensors: Mapping[str, torch.Tensor],
    shards: Sequence[Sequence[str]] | None = None,
) -> None:
    """One ``model.safetensors``, or shards + ``model.safetensors.index.json``.

    :param shards: key groups, one a shard; keys not listed go to the last shard.
    """
    path.mkdir(parents=True, exist_ok=True)
    for old in path.glob("model*.safetensors*"):
        old.unlink()
    meta = {"format": "pt"}
    if shards is None:
        save_file(_own(tensors), str(path / "model.safetensors"), metadata=meta)
        return
    groups = [list(g) for g in shards]
    listed = {k for g in groups for k in g}
    groups[-1].extend(k for k in tensors if k not in listed)
    weight_map: dict[str, str] = {}
    for i, group in enumerate(groups):
        name = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        part = _own({k: tensors[k] for k in group})
        save_file(part, str(path / name), metadata=meta)
        weight_map.update(dict.fromkeys(group, name))
    index = {"metadata": {}, "weight_map": weight_map}
    (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def perturb_norms(model: torch.nn.Module, seed: int) -> None:
    """Norm weights away from ones (biases from zeros), so a wrong convention shows."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            leaf = name.rsplit(".", 2)
            if len(leaf) < 2 or not any(n in leaf[-2] for n in ("norm", "ln_f")):
                continue
            noise = torch.randn(param.shape, generator=gen) * 0.3
            param.copy_((1.0 if leaf[-1] == "weight" else 0.0) + noise)


def save_pretrained(
    out: Path,
    model_class: Any,
    config: Any,
    tokenizer: Any,
    *,
    seed: int,
    perturb: bool = True,
) -> Any:
    """``model_class(config)`` initialized under ``seed``, saved as transformers
    writes it (the Hub's layout), with ``tokenizer``.

    :param perturb: final norms away from ones (:func:`perturb_norms`).
    :returns: the model, in eval mode.
    """
    torch.manual_seed(seed)
    model = model_class(config).eval()
    if perturb:
        perturb_norms(model, seed)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return model


def saved_keys(path: Path) -> set[str]:
    """The tensor names of a single-file checkpoint (no data read)."""
    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        return set(f.keys())


_REMOTE_CODE = """\
from pathlib import Path

Path({marker!r}).write_text("imported {name}")
"""


def remote_code(path: Path, marker: Path, classes: Mapping[str, str]) -> dict[str, str]:
    """Code files that write ``marker`` when imported; returns their ``auto_map``.

    :param classes: ``{Auto class: "module.Class"}``; each module is written.
    """
    path.mkdir(parents=True, exist_ok=True)
    for module in sorted({target.split(".")[0] for target in classes.values()}):
        text = _REMOTE_CODE.format(marker=str(marker), name=module)
        (path / f"{module}.py").write_text(text)
    return dict(classes)


def write_skeleton(
    path: Path,
    config: Mapping[str, Any],
    *,
    prefix: str,
    head_key: str | None,
    decoys: Mapping[str, torch.Tensor] | None = None,
    head: Mapping[str, torch.Tensor] | None = None,
    norm: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    sharded: bool = True,
) -> Path:
    """A checkpoint with a real key layout but only what a header reader looks at.

    Written: the decoder's embedding (random), each layer's ``input_layernorm``
    (a look-alike of the final norm), the final norm and the output head (random,
    unless ``head`` replaces it; none when ``head_key`` is ``None``: tied), plus
    ``decoys`` (other towers). Sizes come from the (text) config. Far cheaper than
    a real model, so the benchmark can have Kimi-K2.5's real vocabulary and width.

    :param sharded: three shards (embedding | layers and decoys | final norm and
        head), else one shard; always with an index.
    """
    text = config.get("text_config", config)
    vocab, hidden = text["vocab_size"], text["hidden_size"]
    gen = torch.Generator().manual_seed(seed)
    pre = f"{prefix}." if prefix else ""
    first = {
        f"{pre}embed_tokens.weight": torch.randn(
            vocab, hidden, generator=gen, dtype=dtype
        )
    }
    middle = {
        f"{pre}layers.{i}.input_layernorm.weight": torch.ones(hidden, dtype=dtype)
        for i in range(text["num_hidden_layers"])
    }
    middle.update(decoys or {})
    if head is None and head_key is not None:
        head = {head_key: torch.randn(vocab, hidden, generator=gen, dtype=dtype)}
    if norm is None:
        norm = torch.rand(hidden, generator=gen, dtype=dtype) + 0.5
    last = {**(head or {}), f"{pre}norm.weight": norm}
    write_config(path, config)
    groups = [first, middle, last] if sharded else [{**first, **middle, **last}]
    tensors = {k: v for group in groups for k, v in group.items()}
    write_checkpoint(path, tensors, [list(group) for group in groups])
    return path
