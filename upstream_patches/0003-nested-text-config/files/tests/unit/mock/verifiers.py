"""Tiny verifier checkpoints (config files only) in the layouts found on the Hub."""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import transformers
from transformers import (
    DeepseekV3Config,
    Gemma3Config,
    Kimi_K25Config,
    Llama4Config,
    LlamaConfig,
    Qwen2_5_VLConfig,
    Qwen2_5OmniConfig,
)

HIDDEN = 64
VOCAB = 256
LAYERS = 8
HEADS = 4
KV_HEADS = 2


@dataclass(frozen=True)
class Expected:
    """What the verifier's text config implies for the draft."""

    hidden_size: int
    vocab_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int


DENSE = Expected(HIDDEN, VOCAB, LAYERS, HEADS, KV_HEADS, HIDDEN // HEADS)
# MLA: per-head width is v_head_dim (32), not transformers' head_dim (rope, 8).
MLA = Expected(HIDDEN, VOCAB, LAYERS, HEADS, HEADS, 32)


#: The geometry every mock text config shares.
SIZES: dict[str, int] = {
    "hidden_size": HIDDEN,
    "vocab_size": VOCAB,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": HEADS,
}


def dense_text(**overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        **SIZES,
        "num_key_value_heads": KV_HEADS,
        "intermediate_size": 128,
        "max_position_embeddings": 512,
    }
    values.update(overrides)
    return values


def mla_text(**overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        **SIZES,
        "num_key_value_heads": HEADS,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "n_group": 1,
        "topk_group": 1,
        "first_k_dense_replace": 1,
        "kv_lora_rank": 16,
        "q_lora_rank": 24,
        "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 16,
        "v_head_dim": 32,
        "max_position_embeddings": 512,
        "tie_word_embeddings": False,
    }
    values.update(overrides)
    return values


KIMI_VISION = {
    "patch_size": 14,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
}

REMOTE_CONFIG_TEMPLATE = """
from pathlib import Path

from transformers import PretrainedConfig

Path({marker!r}).write_text("imported")


class RemoteTextConfig(PretrainedConfig):
    model_type = {text_model_type!r}


class RemoteWrapperConfig(PretrainedConfig):
    model_type = {model_type!r}

    def __init__(self, {sub_name}=None, **kwargs):
        if isinstance({sub_name}, dict):
            {sub_name} = RemoteTextConfig(**{sub_name})
        self.{sub_name} = {sub_name}
        super().__init__(**kwargs)
"""


def write_config(path: Path, config_dict: dict[str, Any]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config_dict, indent=2))
    return path


def write_remote_checkpoint(
    path: Path,
    *,
    model_type: str,
    sub_name: str,
    text: dict[str, Any],
    extra: dict[str, Any] | None = None,
) -> tuple[Path, Path]:
    """A checkpoint whose config needs remote code; returns (dir, marker file).

    Its ``configuration_remote.py`` writes the marker file when imported.
    """
    marker = path.parent / f"{path.name}.imported"
    path.mkdir(parents=True, exist_ok=True)
    (path / "configuration_remote.py").write_text(
        REMOTE_CONFIG_TEMPLATE.format(
            marker=str(marker),
            text_model_type=text.get("model_type", "remote_text"),
            model_type=model_type,
            sub_name=sub_name,
        )
    )
    config_dict: dict[str, Any] = {
        "model_type": model_type,
        "architectures": ["RemoteForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_remote.RemoteWrapperConfig"},
        sub_name: text,
    }
    config_dict.update(extra or {})
    write_config(path, config_dict)
    return path, marker


def remote_wrapper(
    path: Path, wrapper: str, sub_name: str, text_type: str = "llama", **extra: Any
) -> tuple[Path, Path]:
    """A remote-code ``wrapper`` config holding a dense ``text_type`` text config
    under ``sub_name`` (and ``extra`` top-level keys); returns (dir, marker)."""
    text = dense_text(model_type=text_type)
    return write_remote_checkpoint(
        path, model_type=wrapper, sub_name=sub_name, text=text, extra=extra or None
    )


def transformers_class(name: str) -> type:
    """transformers' class ``name``; the test is skipped where it has none."""
    found = getattr(transformers, name, None)
    if found is None:
        pytest.skip(f"this transformers has no {name}")
    return found


def kimi_k25_native(path: Path) -> Path:
    """Kimi-K2.5 as transformers ships it (``Kimi_K25Config.save_pretrained``)."""
    Kimi_K25Config(
        text_config={"model_type": "kimi_k2", **mla_text()},
        vision_config=KIMI_VISION,
    ).save_pretrained(path)
    return path


def kimi_k25_hub(path: Path) -> tuple[Path, Path]:
    """Kimi-K2.5 as the Hub ships it: remote code, ``kimi_k2`` text config."""
    text = {
        "model_type": "kimi_k2",
        **mla_text(),
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "pack-quantized",
        },
    }
    return write_remote_checkpoint(
        path,
        model_type="kimi_k25",
        sub_name="text_config",
        text=text,
        extra={
            "architectures": ["KimiK25ForConditionalGeneration"],
            "vision_config": KIMI_VISION,
            "tie_word_embeddings": True,
        },
    )


def gemma3(path: Path) -> Path:
    Gemma3Config(
        text_config=dense_text(
            head_dim=HIDDEN // HEADS, sliding_window=32, tie_word_embeddings=True
        ),
        vision_config={
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 64,
        },
    ).save_pretrained(path)
    return path


def qwen2_5_vl(path: Path) -> Path:
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}
    Qwen2_5_VLConfig(
        text_config=dense_text(rope_parameters=rope),
        vision_config={"depth": 1, "hidden_size": 32, "num_heads": 2},
    ).save_pretrained(path)
    return path


def llama4(path: Path) -> Path:
    Llama4Config(
        text_config=dense_text(
            head_dim=HIDDEN // HEADS,
            intermediate_size_mlp=128,
            num_local_experts=2,
        ),
        vision_config={"hidden_size": 32, "num_hidden_layers": 1},
    ).save_pretrained(path)
    return path


def qwen2_5_omni(path: Path) -> Path:
    Qwen2_5OmniConfig(
        thinker_config={"text_config": dense_text()},
    ).save_pretrained(path)
    return path


def llama(path: Path) -> Path:
    LlamaConfig(**dense_text()).save_pretrained(path)
    return path


def deepseek_v3(path: Path) -> Path:
    DeepseekV3Config(**mla_text()).save_pretrained(path)
    return path
