"""Tiny verifier checkpoints *with weights*, in the key layouts found on the Hub.

Each builder instantiates the verifier's text model with transformers (tiny
sizes), writes its tensors under the layout's key names (plus decoy towers:
vision, audio, talker, DeepSeek MTP layers), and returns a :class:`Zoo` entry
holding the instantiated model, so tests can compare the loaded tensors with the
ones the verifier actually uses.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    FalconConfig,
    GPTNeoXConfig,
    MptConfig,
    PretrainedConfig,
    Qwen2_5OmniThinkerTextModel,
    Qwen3Config,
)
from transformers.models.qwen2_5_omni.configuration_qwen2_5_omni import (
    Qwen2_5OmniTextConfig,
)

from speculators.utils.text_config import load_text_config
from tests.unit import verifiers


@dataclass
class Zoo:
    """A written checkpoint and the tensors its verifier uses."""

    path: Path
    embed: torch.Tensor
    head: torch.Tensor
    final_norm: torch.nn.Module
    embed_key: str
    head_key: str
    norm_key: str


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


def _randomize(model: torch.nn.Module) -> None:
    torch.manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn_like(param) * 0.5)


def _text_model(text_config: PretrainedConfig) -> torch.nn.Module:
    if isinstance(text_config, Qwen2_5OmniTextConfig):
        model = Qwen2_5OmniThinkerTextModel(text_config)
    else:
        try:
            model = AutoModelForCausalLM.from_config(text_config)
        except ValueError:
            model = AutoModel.from_config(text_config)
    _randomize(model)
    return model.eval()


def _decoder(model: torch.nn.Module) -> torch.nn.Module:
    for name in ("model", "transformer", "gpt_neox"):
        child = getattr(model, name, None)
        if isinstance(child, torch.nn.Module):
            return child
    return model


def _final_norm(model: torch.nn.Module) -> tuple[str, torch.nn.Module]:
    decoder = _decoder(model)
    for name in ("norm", "final_layer_norm", "ln_f", "norm_f"):
        if hasattr(decoder, name):
            return name, getattr(decoder, name)
    raise AssertionError(f"no final norm on {type(decoder).__name__}")


def _build(
    path: Path,
    model: torch.nn.Module,
    rename: Callable[[str], str],
    *,
    tied: bool,
    decoys: dict[str, torch.Tensor] | None = None,
    shards: Callable[[list[str]], list[list[str]]] | None = None,
    drop_head: bool = False,
) -> Zoo:
    """Write ``model``'s weights under ``rename``d keys (+ decoys)."""
    head_module = model.get_output_embeddings()
    state = {
        (key if head_module is not None else f"model.{key}"): value
        for key, value in model.state_dict(keep_vars=True).items()
    }
    embed = model.get_input_embeddings().weight
    if head_module is None:
        # A base text model (no head class for this text config): add one.
        torch.manual_seed(1)
        head = embed if tied else torch.randn_like(embed)
        if not tied:
            state["lm_head.weight"] = head
    else:
        head = head_module.weight
    norm_name, norm = _final_norm(model)
    tensors: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if drop_head and key.endswith("lm_head.weight"):
            continue
        tensors[rename(key)] = value
    tensors.update(decoys or {})
    write_checkpoint(path, tensors, shards(list(tensors)) if shards else None)
    embed_key = next(
        rename(k) for k, v in state.items() if v is embed and "layers" not in k
    )
    base_norm_key = next(
        k for k in state if k.endswith(f"{norm_name}.weight") and ".layers." not in k
    )
    head_key = embed_key if (drop_head or head is embed) else rename("lm_head.weight")
    if head_module is not None and not drop_head and head is not embed:
        head_key = next(rename(k) for k, v in state.items() if v is head)
    return Zoo(
        path,
        embed.detach().clone(),
        head.detach().clone(),
        norm,
        embed_key,
        head_key,
        rename(base_norm_key),
    )


def _swap(old: str, new: str) -> Callable[[str], str]:
    def rename(key: str) -> str:
        if key.startswith(old):
            return new + key[len(old) :]
        return key

    return rename


def _layouts(model_prefix: str, head_key: str) -> Callable[[str], str]:
    def rename(key: str) -> str:
        if key == "lm_head.weight":
            return head_key
        if key.startswith("model."):
            return f"{model_prefix}.{key[len('model.') :]}"
        return key

    return rename


def _tower(
    prefix: str, layers: int, hidden: int, leaf: str = "layers"
) -> dict[str, torch.Tensor]:
    """Decoy tower tensors: per-layer norms and projections, plus a final norm."""
    out: dict[str, torch.Tensor] = {}
    for i in range(layers):
        out[f"{prefix}.{leaf}.{i}.input_layernorm.weight"] = torch.ones(hidden)
        out[f"{prefix}.{leaf}.{i}.mlp.fc.weight"] = torch.randn(hidden, hidden)
    out[f"{prefix}.norm.weight"] = torch.full((hidden,), 3.0)
    return out


def _load(path: Path) -> torch.nn.Module:
    return _text_model(load_text_config(path))


def llama(tmp: Path) -> Zoo:
    path = verifiers.llama(tmp / "llama")
    return _build(path, _load(path), lambda k: k, tied=False)


def qwen3_tied(tmp: Path) -> Zoo:
    path = tmp / "qwen3"
    Qwen3Config(**verifiers.dense_text(tie_word_embeddings=True)).save_pretrained(path)
    return _build(path, _load(path), lambda k: k, tied=True, drop_head=True)


def kimi_k25_native(tmp: Path) -> Zoo:
    path = verifiers.kimi_k25_native(tmp / "kimi_native")
    decoys = _tower("model.vision_tower.encoder", 2, 32, leaf="blocks")
    decoys["model.mm_projector.pre_norm.weight"] = torch.ones(32)
    return _build(
        path,
        _load(path),
        _layouts("model.language_model", "lm_head.weight"),
        tied=False,
        decoys=decoys,
    )


def kimi_k25_hub(tmp: Path, *, sharded: bool = False) -> Zoo:
    path, _ = verifiers.kimi_k25_hub(tmp / ("kimi_sharded" if sharded else "kimi_hub"))
    decoys = _tower("vision_tower.encoder", 2, 32, leaf="blocks")
    decoys["mm_projector.proj.0.weight"] = torch.randn(64, 32)

    def shards(keys: list[str]) -> list[list[str]]:
        first = ["language_model.model.embed_tokens.weight"]
        middle = [k for k in keys if ".layers.0." in k or ".layers.1." in k]
        last = ["language_model.lm_head.weight", "language_model.model.norm.weight"]
        rest = [k for k in keys if k not in {*first, *middle, *last}]
        return [first, middle, rest, last]

    return _build(
        path,
        _load(path),
        _layouts("language_model.model", "language_model.lm_head.weight"),
        tied=False,
        decoys=decoys,
        shards=shards if sharded else None,
    )


def qwen2_5_vl(tmp: Path) -> Zoo:
    path = verifiers.qwen2_5_vl(tmp / "qwen2_5_vl")
    decoys = _tower("model.visual", 1, 32, leaf="blocks")
    decoys["model.visual.merger.ln_q.weight"] = torch.ones(32)
    return _build(
        path,
        _load(path),
        _layouts("model.language_model", "lm_head.weight"),
        tied=False,
        decoys=decoys,
    )


def gemma3(tmp: Path) -> Zoo:
    path = verifiers.gemma3(tmp / "gemma3")
    decoys = _tower("model.vision_tower.vision_model.encoder", 1, 32)
    decoys["model.vision_tower.vision_model.post_layernorm.weight"] = torch.ones(32)
    decoys["model.multi_modal_projector.mm_soft_emb_norm.weight"] = torch.ones(32)
    return _build(
        path,
        _load(path),
        _layouts("model.language_model", "lm_head.weight"),
        tied=True,
        decoys=decoys,
        drop_head=True,
    )


def llama4(tmp: Path) -> Zoo:
    path = verifiers.llama4(tmp / "llama4")
    decoys = _tower("vision_model.model", 1, 32)
    return _build(
        path,
        _load(path),
        _layouts("language_model.model", "language_model.lm_head.weight"),
        tied=False,
        decoys=decoys,
    )


def qwen2_5_omni(tmp: Path) -> Zoo:
    """Thinker + talker: the talker has its own embed/norm/layers (same count)."""
    path = verifiers.qwen2_5_omni(tmp / "qwen2_5_omni")
    talker_hidden = 48
    decoys = _tower("talker.model", verifiers.LAYERS, talker_hidden)
    decoys["talker.model.embed_tokens.weight"] = torch.randn(300, talker_hidden)
    decoys["talker.codec_head.weight"] = torch.randn(300, talker_hidden)
    decoys["talker.thinker_to_talker_proj.weight"] = torch.randn(
        talker_hidden, verifiers.HIDDEN
    )
    decoys.update(_tower("thinker.audio_tower", 2, 32))
    return _build(
        path,
        _load(path),
        _layouts("thinker.model", "thinker.lm_head.weight"),
        tied=False,
        decoys=decoys,
    )


def deepseek_v3_mtp(tmp: Path) -> Zoo:
    path = verifiers.deepseek_v3(tmp / "deepseek_v3")
    config = json.loads((path / "config.json").read_text())
    config["num_nextn_predict_layers"] = 1
    (path / "config.json").write_text(json.dumps(config))
    mtp = f"model.layers.{verifiers.LAYERS}"
    decoys = {
        f"{mtp}.embed_tokens.weight": torch.randn(verifiers.VOCAB, verifiers.HIDDEN),
        f"{mtp}.shared_head.head.weight": torch.randn(
            verifiers.VOCAB, verifiers.HIDDEN
        ),
        f"{mtp}.shared_head.norm.weight": torch.full((verifiers.HIDDEN,), 2.0),
        f"{mtp}.enorm.weight": torch.ones(verifiers.HIDDEN),
        f"{mtp}.hnorm.weight": torch.ones(verifiers.HIDDEN),
        f"{mtp}.input_layernorm.weight": torch.ones(verifiers.HIDDEN),
    }
    return _build(path, _load(path), lambda k: k, tied=False, decoys=decoys)


def gpt_neox(tmp: Path) -> Zoo:
    path = tmp / "gpt_neox"
    GPTNeoXConfig(
        vocab_size=verifiers.VOCAB,
        hidden_size=verifiers.HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=verifiers.HEADS,
        intermediate_size=128,
        tie_word_embeddings=False,
    ).save_pretrained(path)
    return _build(path, _load(path), lambda k: k, tied=False)


def falcon(tmp: Path) -> Zoo:
    """Falcon: ``transformer.ln_f`` (LayerNorm with bias), tied head."""
    path = tmp / "falcon"
    FalconConfig(
        vocab_size=verifiers.VOCAB,
        hidden_size=verifiers.HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=verifiers.HEADS,
        tie_word_embeddings=True,
    ).save_pretrained(path)
    return _build(path, _load(path), lambda k: k, tied=True, drop_head=True)


def mpt(tmp: Path) -> Zoo:
    """MPT: ``transformer.norm_f`` (LayerNorm without bias), tied head."""
    path = tmp / "mpt"
    MptConfig(
        vocab_size=verifiers.VOCAB,
        d_model=verifiers.HIDDEN,
        n_layers=2,
        n_heads=verifiers.HEADS,
    ).save_pretrained(path)
    return _build(path, _load(path), lambda k: k, tied=True, drop_head=True)


ZOO: dict[str, Callable[[Path], Zoo]] = {
    "llama": llama,
    "qwen3_tied": qwen3_tied,
    "kimi_k25_native": kimi_k25_native,
    "kimi_k25_hub": kimi_k25_hub,
    "kimi_k25_sharded": lambda tmp: kimi_k25_hub(tmp, sharded=True),
    "qwen2_5_vl": qwen2_5_vl,
    "gemma3": gemma3,
    "llama4": llama4,
    "qwen2_5_omni": qwen2_5_omni,
    "deepseek_v3_mtp": deepseek_v3_mtp,
    "gpt_neox": gpt_neox,
    "falcon": falcon,
    "mpt": mpt,
}


def describe(zoo: Zoo) -> dict[str, Any]:
    return {"embed": zoo.embed_key, "head": zoo.head_key, "norm": zoo.norm_key}
