"""Tiny verifiers of the newer transformers classes, saved as transformers writes them.

Hybrids whose decoder mixes attention with linear-attention, Mamba or
short-convolution layers: Qwen3.5 (``model.language_model.*`` next to a vision
tower, ``x * (1 + w)`` final norm), Qwen3.5-MoE (text only), Kimi-Linear,
Nemotron-H (the Hub's ``backbone.*`` keys, ``norm_f``, ``mlp_hidden_act``) and LFM2
(its final norm ``embedding_norm``). And DeepSeek-V4, whose layers carry
hyper-connection streams (``hc_mult``) mixed by ``hc_head`` before the final norm
and ``head.weight``: the verifier no EAGLE-3 draft can train on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .checkpoint import TinyCheckpoint, save_pretrained, saved_keys
from .configs import dense_text
from .specs import TinyVerifierSpec
from .tokenizer import build_byte_level_tokenizer, build_tokenizer, token_ids

__all__ = [
    "deepseek_v4",
    "kimi_linear",
    "lfm2",
    "nemotron_h",
    "qwen3_5",
    "qwen3_5_moe",
]

_SPEC = TinyVerifierSpec()
#: Three linear-attention layers, then one full attention layer, twice.
_LAYER_TYPES = ["linear_attention"] * 3 + ["full_attention"]
_LINEAR: dict[str, Any] = {
    "head_dim": 16,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "layer_types": _LAYER_TYPES * 2,
}


def _text(tokens: dict[str, int], **overrides: Any) -> dict[str, Any]:
    """The tiny dense family's sizes (hidden 64, 8 layers, GQA 4/2), 256 positions."""
    return dense_text(tokens, max_position_embeddings=256, **overrides)


def qwen3_5(out: Path) -> TinyCheckpoint:
    """Qwen3.5 (``Qwen3_5ForConditionalGeneration``): gated-deltanet hybrid."""
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    tok = build_byte_level_tokenizer(_SPEC)
    media = _SPEC.vocab_size - 4
    vision = {"depth": 1, "hidden_size": 32, "intermediate_size": 48, "num_heads": 2}
    vision.update(out_hidden_size=_SPEC.hidden_size, num_position_embeddings=16)
    cfg = Qwen3_5Config(
        text_config=_text(token_ids(tok), **_LINEAR),
        vision_config={**vision, "patch_size": 4},
        image_token_id=media,
        video_token_id=media + 1,
        vision_start_token_id=media + 2,
        vision_end_token_id=media + 3,
        tie_word_embeddings=False,
    )
    model = save_pretrained(out, Qwen3_5ForConditionalGeneration, cfg, tok, seed=41)
    assert "model.language_model.norm.weight" in saved_keys(out)
    return TinyCheckpoint(out, model, model.model.language_model.norm)


def qwen3_5_moe(out: Path) -> TinyCheckpoint:
    """Qwen3.5-MoE's text model (``Qwen3_5MoeForCausalLM``)."""
    from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

    tok = build_byte_level_tokenizer(_SPEC)
    moe = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
    cfg = Qwen3_5MoeTextConfig(
        **_text(token_ids(tok), **_LINEAR, **moe),
        shared_expert_intermediate_size=32,
    )
    model = save_pretrained(out, Qwen3_5MoeForCausalLM, cfg, tok, seed=42)
    return TinyCheckpoint(out, model, model.model.norm)


def kimi_linear(out: Path) -> TinyCheckpoint:
    """Kimi-Linear (``KimiLinearForCausalLM``): KDA linear attention beside MLA."""
    from transformers import KimiLinearConfig, KimiLinearForCausalLM

    tok = build_tokenizer(_SPEC)
    mla = {"kv_lora_rank": 16, "q_lora_rank": None, "qk_rope_head_dim": 8}
    mla.update(qk_nope_head_dim=16, v_head_dim=16, num_key_value_heads=4)
    moe: dict[str, Any] = {"num_experts_per_tok": 2, "num_local_experts": 4}
    moe.update(n_shared_experts=1, moe_intermediate_size=32)
    moe.update(mlp_layer_types=["dense"] + ["sparse"] * 7)
    linear = {"linear_head_dim": 16, "linear_num_heads": 4}
    cfg = KimiLinearConfig(
        **_text(token_ids(tok), **mla, **moe, **linear),
        linear_conv_kernel_dim=4,
        layer_types=_LAYER_TYPES * 2,
    )
    model = save_pretrained(out, KimiLinearForCausalLM, cfg, tok, seed=43)
    return TinyCheckpoint(out, model, model.model.norm)


def nemotron_h(out: Path) -> TinyCheckpoint:
    """Nemotron-H (``NemotronHForCausalLM``): Mamba-2 hybrid, ``backbone.*`` keys."""
    from transformers import NemotronHConfig, NemotronHForCausalLM

    tok = build_tokenizer(_SPEC)
    blocks = ["linear_attention", "moe", "linear_attention", "full_attention", "mlp"]
    mamba = {"ssm_state_size": 16, "mamba_num_heads": 4, "mamba_head_dim": 16}
    mamba.update(n_groups=2, conv_kernel=4, expand=1, chunk_size=16)
    moe = {"n_routed_experts": 4, "moe_intermediate_size": 32, "num_experts_per_tok": 2}
    text = _text(token_ids(tok), head_dim=16, **mamba, **moe)
    del text["num_hidden_layers"]  # the block pattern gives the depth
    cfg = NemotronHConfig(
        **text,
        layers_block_type=[*blocks, "linear_attention", "moe", "linear_attention"],
        moe_shared_expert_intermediate_size=32,
    )
    model = save_pretrained(out, NemotronHForCausalLM, cfg, tok, seed=44)
    assert "backbone.embeddings.weight" in saved_keys(out)
    return TinyCheckpoint(out, model, model.model.norm_f)


def lfm2(out: Path) -> TinyCheckpoint:
    """LFM2 (``Lfm2ForCausalLM``): gated short convolutions beside attention."""
    from transformers import Lfm2Config, Lfm2ForCausalLM

    tok = build_tokenizer(_SPEC)
    conv = ["conv", "conv", "full_attention", "conv"]
    # At transformers' default 0.02 the short convolutions are too weak to change a
    # greedy token: a stale conv window would decode the same tokens.
    text = _text(token_ids(tok), initializer_range=0.1)
    cfg = Lfm2Config(**text, layer_types=conv * 2)
    model = save_pretrained(out, Lfm2ForCausalLM, cfg, tok, seed=45)
    assert "model.embedding_norm.weight" in saved_keys(out)
    return TinyCheckpoint(out, model, model.model.embedding_norm)


def deepseek_v4(out: Path) -> TinyCheckpoint:
    """DeepSeek-V4 (``DeepseekV4ForCausalLM``): two hyper-connection streams."""
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    tok = build_tokenizer(_SPEC)
    attn = ["heavily_compressed_attention"] * 2 + ["compressed_sparse_attention"]
    index = {"index_n_heads": 2, "index_head_dim": 16, "index_topk": 4}
    index.update(o_groups=2, o_lora_rank=16, q_lora_rank=32, sliding_window=8)
    moe = {"n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2}
    cfg = DeepseekV4Config(
        **_text(token_ids(tok), **index, **moe, num_key_value_heads=1),
        hc_mult=2,
        head_dim=32,
        moe_intermediate_size=32,
        layer_types=[*attn, *attn, "sliding_attention", "sliding_attention"],
        mlp_layer_types=["hash_moe"] + ["moe"] * 7,
        compress_rates={
            "compressed_sparse_attention": 4,
            "heavily_compressed_attention": 8,
        },
        num_nextn_predict_layers=0,
    )
    model = save_pretrained(out, DeepseekV4ForCausalLM, cfg, tok, seed=45)
    assert "head.weight" in saved_keys(out)
    return TinyCheckpoint(out, model, model.model.norm)
