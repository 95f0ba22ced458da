"""Nested (multimodal) tiny verifiers: the text decoder next to other towers.

Gemma-3 (tied head, SigLIP tower), Qwen2.5-VL (``model.*`` text, ``visual.*``),
Llama-4 (``language_model.model.*``) and Qwen2.5-Omni (``thinker.*`` text path
next to a ``talker.*`` decoder of the same width and depth, which must never be
picked).
"""

from __future__ import annotations

from pathlib import Path

import torch

from .checkpoint import (
    TinyCheckpoint,
    perturb_norms,
    save_pretrained,
    saved_keys,
    write_checkpoint,
)
from .configs import dense_text, gemma3_config
from .specs import TinyVerifierSpec
from .tokenizer import build_tokenizer, token_ids

__all__ = ["gemma3", "llama4", "qwen2_5_omni", "qwen2_5_vl"]

_SPEC = TinyVerifierSpec()
_HIDDEN = _SPEC.hidden_size
_MEDIA = _SPEC.vocab_size - 1  # the image/video/audio placeholder token
# Head dim 16: the default M-RoPE sections [16, 24, 24] need head dim 128.
_MROPE = {"rope_type": "default", "mrope_section": [2, 3, 3]}
_VISION = {
    "depth": 1,
    "hidden_size": 32,
    "num_heads": 2,
    "intermediate_size": 64,
    "out_hidden_size": _HIDDEN,
}


def gemma3(out: Path) -> TinyCheckpoint:
    """Gemma-3 (``Gemma3ForConditionalGeneration``): tied head, ``1 + w`` norm."""
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    tok = build_tokenizer(_SPEC)
    config = gemma3_config(token_ids(tok))
    del config["model_type"]
    model = save_pretrained(
        out,
        Gemma3ForConditionalGeneration,
        Gemma3Config(**config),
        tok,
        seed=2,
        perturb=False,
    )
    return TinyCheckpoint(out, model, model.model.language_model.norm)


def qwen2_5_vl(out: Path) -> TinyCheckpoint:
    """Qwen2.5-VL as on the Hub: ``model.*`` text, ``visual.*`` tower, ``lm_head``."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    tok = build_tokenizer(_SPEC)
    rope = {**_MROPE, "rope_theta": 10000.0}
    cfg = Qwen2_5_VLConfig(
        text_config=dense_text(token_ids(tok), rope_parameters=rope),
        vision_config=dict(_VISION),
        tie_word_embeddings=False,
        image_token_id=_MEDIA,
        video_token_id=_MEDIA,
    )
    model = save_pretrained(out, Qwen2_5_VLForConditionalGeneration, cfg, tok, seed=15)
    keys = saved_keys(out)
    assert "model.embed_tokens.weight" in keys and "visual.merger.ln_q.weight" in keys
    return TinyCheckpoint(out, model, model.model.language_model.norm)


def llama4(out: Path) -> TinyCheckpoint:
    """Llama-4 (``Llama4ForConditionalGeneration``): ``language_model.model.*``."""
    from transformers import Llama4Config, Llama4ForConditionalGeneration

    tok = build_tokenizer(_SPEC)
    text = dense_text(
        token_ids(tok),
        head_dim=_HIDDEN // _SPEC.num_heads,
        intermediate_size_mlp=128,
        num_local_experts=2,
    )
    vision = {
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "intermediate_size": 64,
        "num_attention_heads": 2,
        "vision_output_dim": _HIDDEN,
        "projector_input_dim": _HIDDEN,
        "projector_output_dim": _HIDDEN,
    }
    cfg = Llama4Config(
        text_config=text,
        vision_config=vision,
        image_token_index=_MEDIA,
        tie_word_embeddings=False,
    )
    model = save_pretrained(out, Llama4ForConditionalGeneration, cfg, tok, seed=16)
    assert "language_model.model.embed_tokens.weight" in saved_keys(out)
    return TinyCheckpoint(out, model, model.language_model.model.norm)


def qwen2_5_omni(out: Path) -> TinyCheckpoint:
    """Qwen2.5-Omni: ``thinker.*`` (the text path) next to a ``talker.*`` decoder.

    The talker has its own ``model.embed_tokens``/``layers``/``norm`` with the
    thinker's hidden size and layer count; it must never be picked.
    """
    from transformers import (
        Qwen2_5OmniConfig,
        Qwen2_5OmniTalkerConfig,
        Qwen2_5OmniTalkerForConditionalGeneration,
        Qwen2_5OmniThinkerConfig,
        Qwen2_5OmniThinkerForConditionalGeneration,
    )

    tok = build_tokenizer(_SPEC)
    thinker_cfg = Qwen2_5OmniThinkerConfig(
        text_config=dense_text(
            token_ids(tok), rope_parameters={**_MROPE, "rope_theta": 1e6}
        ),
        audio_config={
            "d_model": 32,
            "encoder_layers": 1,
            "encoder_attention_heads": 2,
            "encoder_ffn_dim": 64,
            "output_dim": _HIDDEN,
            "num_mel_bins": 16,
            "max_source_positions": 64,
            "n_window": 8,
        },
        vision_config=dict(_VISION),
        audio_token_index=_MEDIA,
        image_token_index=_MEDIA,
        video_token_index=_MEDIA,
    )
    talker = dense_text(
        vocab_size=300, embedding_size=_HIDDEN, head_dim=_HIDDEN // _SPEC.num_heads
    )
    talker.pop("tie_word_embeddings")
    talker_cfg = Qwen2_5OmniTalkerConfig(**talker)
    torch.manual_seed(17)
    thinker = Qwen2_5OmniThinkerForConditionalGeneration(thinker_cfg).eval()
    perturb_norms(thinker, 17)
    talker = Qwen2_5OmniTalkerForConditionalGeneration(talker_cfg).eval()
    perturb_norms(talker, 18)
    tensors = {f"thinker.{k}": v for k, v in thinker.state_dict().items()}
    tensors.update({f"talker.{k}": v for k, v in talker.state_dict().items()})
    assert "talker.model.norm.weight" in tensors
    write_checkpoint(out, tensors, None)
    Qwen2_5OmniConfig(
        thinker_config=thinker_cfg.to_dict(), talker_config=talker_cfg.to_dict()
    ).save_pretrained(out)
    tok.save_pretrained(out)
    return TinyCheckpoint(out, thinker, thinker.model.norm)
