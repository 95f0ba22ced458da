"""An embedded tiny Kimi-K2.5-shaped verifier (random weights), built offline.

The checkpoint has the layout of ``moonshotai/Kimi-K2.5``: a nested ``config.json``
(``model_type`` ``kimi_k25``, ``architectures`` ``["KimiK25ForConditionalGeneration"]``,
a DeepSeek-V3 ``text_config`` with ``model_type`` ``kimi_k2``: MLA attention and
MoE layers after ``first_k_dense_replace`` dense ones), weights under
``language_model.model.*`` / ``language_model.lm_head.weight`` plus a small
``vision_tower.*`` / ``mm_projector.*`` that text-only paths must ignore, and a
small word-level tokenizer with a chat template.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import save_file
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

from .tiny_verifier import TinyVerifierSpec, build_tokenizer

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "KIMI_ARCHITECTURE",
    "TEXT_PREFIX",
    "KimiTinySpec",
    "build_kimi_tiny",
    "text_config",
]

KIMI_ARCHITECTURE = "KimiK25ForConditionalGeneration"
TEXT_PREFIX = "language_model."
LM_HEAD_SCALE = 25.0


@dataclass(frozen=True)
class KimiTinySpec:
    """Size knobs; the defaults give ~1M parameters."""

    hidden_size: int = 96
    intermediate_size: int = 192
    moe_intermediate_size: int = 48
    num_layers: int = 8
    first_k_dense_replace: int = 2
    n_routed_experts: int = 4
    num_experts_per_tok: int = 2
    num_heads: int = 4
    num_words: int = 504
    max_position_embeddings: int = 1024
    seed: int = 0

    @property
    def tokenizer_spec(self) -> TinyVerifierSpec:
        return TinyVerifierSpec(num_words=self.num_words, seed=self.seed)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer_spec.vocab_size


def text_config(spec: KimiTinySpec, **token_ids: Any) -> DeepseekV3Config:
    """The DeepSeek-V3 text config (tiny MLA + MoE)."""
    return DeepseekV3Config(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        moe_intermediate_size=spec.moe_intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_heads,
        n_routed_experts=spec.n_routed_experts,
        n_shared_experts=1,
        num_experts_per_tok=spec.num_experts_per_tok,
        first_k_dense_replace=spec.first_k_dense_replace,
        n_group=1,
        topk_group=1,
        kv_lora_rank=32,
        q_lora_rank=48,
        qk_rope_head_dim=8,
        qk_nope_head_dim=16,
        v_head_dim=16,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=False,
        **token_ids,
    )


def build_kimi_tiny(
    out_dir: Path, spec: KimiTinySpec | None = None, words: Sequence[str] = ()
) -> Path:
    """Write the tiny Kimi-K2.5-shaped checkpoint and tokenizer to ``out_dir``.

    ``words`` go first into the tokenizer's vocabulary (e.g. a dataset's words).
    """
    spec = spec or KimiTinySpec()
    torch.manual_seed(spec.seed)
    tokenizer = build_tokenizer(spec.tokenizer_spec, words)
    tokenizer.model_max_length = spec.max_position_embeddings
    eos = tokenizer.convert_tokens_to_ids("<|end|>")
    cfg = text_config(
        spec,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = DeepseekV3ForCausalLM(cfg).eval()
    # A peaked output distribution (as a trained model has) gives the draft a
    # target it can visibly learn; the default init makes it nearly uniform.
    with torch.no_grad():
        model.lm_head.weight.mul_(LM_HEAD_SCALE)
    tensors = {
        TEXT_PREFIX + k: v.detach().contiguous() for k, v in model.state_dict().items()
    }
    vision_hidden = 32
    tensors["vision_tower.patch_embed.proj.weight"] = torch.randn(
        vision_hidden, 3, 14, 14
    )
    # Look-alike names that a suffix match could confuse with the text model's.
    tensors["vision_tower.encoder.final_layernorm.weight"] = torch.ones(vision_hidden)
    tensors["mm_projector.proj.0.weight"] = torch.randn(
        spec.hidden_size, vision_hidden * 4
    )

    text = cfg.to_dict()
    text["model_type"] = "kimi_k2"
    text["architectures"] = ["DeepseekV3ForCausalLM"]
    for key in ("transformers_version", "dtype", "torch_dtype"):
        text.pop(key, None)
    config = {
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
        "tie_word_embeddings": False,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": eos,
        "pad_token_id": tokenizer.pad_token_id,
        "image_token_id": spec.vocab_size - 1,
        "video_token_id": spec.vocab_size - 1,
        "vision_start_token_id": spec.vocab_size - 1,
        "vision_end_token_id": spec.vocab_size - 1,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save_pretrained(out_dir)
    return out_dir
