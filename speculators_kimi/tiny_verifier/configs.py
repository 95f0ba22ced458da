"""The tiny verifiers' configs as plain dicts: one definition per family's shape.

Real builders pass them to transformers' config classes; header-level checkpoints
(:func:`.checkpoint.write_skeleton`, for ``doctor`` tests and the weight-loading
benchmark) write them to ``config.json`` as they are. Nothing heavy is imported.
"""

from __future__ import annotations

from typing import Any

from .specs import KimiTinySpec, TinyVerifierSpec

__all__ = [
    "KIMI_ARCHITECTURE",
    "KIMI_K25_TEXT",
    "dense_text",
    "gemma3_config",
    "kimi_k25_config",
    "mla_text",
]

KIMI_ARCHITECTURE = "KimiK25ForConditionalGeneration"

#: Kimi-K2.5's text config at its real sizes (DeepSeek-V3 geometry), as its
#: config.json ships it: for the size checks and benchmarks, never built whole.
KIMI_K25_TEXT: dict[str, Any] = {
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "vocab_size": 163840,
    "max_position_embeddings": 262144,
    "n_routed_experts": 384,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 1,
    "n_group": 1,
    "topk_group": 1,
}

#: Fields of a saved config that do not describe the model.
_VOLATILE = ("transformers_version", "dtype", "torch_dtype")


def _sizes(spec: TinyVerifierSpec | KimiTinySpec) -> dict[str, int]:
    """The config keys both families take from their spec the same way."""
    return {
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
    }


def dense_text(
    tokens: dict[str, int] | None = None,
    spec: TinyVerifierSpec | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """Keyword arguments of a tiny dense text config (hidden 64, 8 layers, GQA 4/2).

    :param tokens: ``bos/eos/pad_token_id`` (:func:`.tokenizer.token_ids`).
    """
    spec = spec or TinyVerifierSpec()
    values: dict[str, Any] = {
        **_sizes(spec),
        "num_key_value_heads": spec.num_kv_heads,
        "max_position_embeddings": 1024,
        "tie_word_embeddings": False,
        **(tokens or {}),
    }
    values.update(overrides)
    return values


def mla_text(spec: KimiTinySpec | None = None, **overrides: Any) -> dict[str, Any]:
    """Keyword arguments of a DeepSeek-V3 text config (MLA + MoE), Kimi-K2's shape.

    ``overrides`` set anything else (Kimi-K2.5's real sizes in the benchmark).
    """
    spec = spec or KimiTinySpec()
    values: dict[str, Any] = {
        **_sizes(spec),
        "moe_intermediate_size": spec.moe_intermediate_size,
        "num_key_value_heads": spec.num_heads,
        "n_routed_experts": spec.n_routed_experts,
        "n_shared_experts": 1,
        "num_experts_per_tok": spec.num_experts_per_tok,
        "first_k_dense_replace": spec.first_k_dense_replace,
        "n_group": 1,
        "topk_group": 1,
        "kv_lora_rank": 32,
        "q_lora_rank": 48,
        "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 16,
        "v_head_dim": 16,
        "max_position_embeddings": spec.max_position_embeddings,
        "tie_word_embeddings": False,
    }
    values.update(overrides)
    return values


def kimi_k25_config(
    text: dict[str, Any],
    *,
    tokens: dict[str, int] | None = None,
    vision_hidden: int = 32,
    tie_word_embeddings: bool = False,
    auto_map: dict[str, str] | None = None,
) -> dict[str, Any]:
    """``config.json`` of ``moonshotai/Kimi-K2.5``'s shape around a text config.

    :param text: the text config (:func:`mla_text`, or a saved DeepSeek-V3
        config's dict); it is written as ``kimi_k2``.
    :param auto_map: the Hub's remote-code classes (:func:`.checkpoint.remote_code`).
    """
    text = {k: v for k, v in text.items() if k not in _VOLATILE}
    text["model_type"] = "kimi_k2"
    config: dict[str, Any] = {
        "architectures": [KIMI_ARCHITECTURE],
        "model_type": "kimi_k25",
        "text_config": text,
        "vision_config": {
            "patch_size": 14,
            "hidden_size": vision_hidden,
            "intermediate_size": 64,
            "num_attention_heads": 2,
            "num_hidden_layers": 1,
            "pos_emb_height": 8,
            "pos_emb_width": 8,
            "pos_emb_time": 1,
            "merge_kernel_size": [2, 2],
        },
        "projection_hidden_size": vision_hidden,
        "tie_word_embeddings": tie_word_embeddings,
        **(tokens or {}),
    }
    media = text["vocab_size"] - 1
    for name in ("image", "video", "vision_start", "vision_end"):
        config[f"{name}_token_id"] = media
    if auto_map is not None:
        config["auto_map"] = auto_map
    return config


def gemma3_config(
    tokens: dict[str, int] | None = None, spec: TinyVerifierSpec | None = None
) -> dict[str, Any]:
    """Gemma-3 (``gemma3``: a ``gemma3_text`` model, a SigLIP tower, tied head)."""
    spec = spec or TinyVerifierSpec()
    text = dense_text(tokens, spec, head_dim=16, sliding_window=32)
    text.update(model_type="gemma3_text", tie_word_embeddings=True)
    return {
        "model_type": "gemma3",
        "text_config": text,
        "vision_config": {
            "model_type": "siglip_vision_model",
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 28,
            "patch_size": 14,
        },
        "mm_tokens_per_image": 1,
        "image_token_index": spec.vocab_size - 1,
    }
