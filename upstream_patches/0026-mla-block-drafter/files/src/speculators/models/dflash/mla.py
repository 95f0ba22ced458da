# SPDX-License-Identifier: Apache-2.0
"""DFlash-family draft layers with DeepSeek-V3 multi-head latent attention (MLA).

A DFlash layer attends from the block's tokens to the context (the verifier's aux
hidden states after ``fc`` and ``hidden_norm``) and to the block itself. Here both
go through the layer's own latent path, as in the verifier: ``kv_a_proj_with_mqa``
gives the compressed latent and the shared rope key, ``kv_a_layernorm`` normalizes
the latent and ``kv_b_proj`` expands it into per-head keys and values. What a
layer caches per position is therefore ``kv_lora_rank + qk_rope_head_dim`` wide,
the verifier's KV page layout. Rope is the verifier's (interleaved pairs when
``rope_interleave``; YaRN's mscale reaches the softmax scale as in DeepSeek-V3).
Every layer has full attention (no sliding window), bidirectional inside the
block, and a dense MLP.
"""

from typing import TYPE_CHECKING

import torch
from transformers import DeepseekV3Config, PretrainedConfig
from transformers.cache_utils import Cache
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
    DeepseekV3Attention,
    DeepseekV3MLP,
    DeepseekV3RMSNorm,
    DeepseekV3RotaryEmbedding,
    apply_rotary_pos_emb,
    apply_rotary_pos_emb_interleave,
    eager_attention_forward,
)

from speculators.models.dflash.model_definitions import Qwen3DFlashDecoderLayer

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "MLA_DRAFT_ARCH",
    "DeepseekV3DFlashAttention",
    "DeepseekV3DFlashDecoderLayer",
    "DeepseekV3RotaryEmbedding",
    "is_mla_layer_config",
]

#: ``--draft-arch`` (and the layer config's ``model_type``) of MLA draft layers.
MLA_DRAFT_ARCH = "deepseek_v3"


def is_mla_layer_config(config: PretrainedConfig) -> bool:
    """Whether a DFlash-family ``transformer_layer_config`` builds MLA layers."""
    return getattr(config, "model_type", None) == MLA_DRAFT_ARCH


class DeepseekV3DFlashAttention(DeepseekV3Attention):
    """DeepSeek-V3 MLA whose keys and values cover the context and the block.

    The parameters (and their names) are DeepSeek-V3's. The context's latent comes
    from ``kv_a_proj_with_mqa(target_hidden)``, the block's from the block's
    hidden states; both are normalized, roped and expanded the same way. A cache
    holds the latents (``past_key_values.update(kv_nope, k_rot)``), as
    transformers' DeepSeek-V3 attention caches them.
    """

    def __init__(self, config: DeepseekV3Config, layer_idx: int):
        super().__init__(config, layer_idx)
        # Bidirectional inside the block; the mask says what each query sees.
        self.is_causal = False
        self.sliding_window = None

    def _rope(
        self, states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> torch.Tensor:
        apply = (
            apply_rotary_pos_emb_interleave
            if self.config.rope_interleave
            else apply_rotary_pos_emb
        )
        return apply(states, states, cos, sin)[0]

    def forward(  # type: ignore[override]  # noqa: PLR0917
        self,
        hidden_states: torch.Tensor,
        target_hidden: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None,
        past_key_values: Cache | None = None,
        cache_position: torch.LongTensor | None = None,  # noqa: ARG002
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        bsz, q_len = hidden_states.shape[:-1]
        kv_len = target_hidden.shape[1] + q_len

        if self.q_lora_rank is None:
            q_states = self.q_proj(hidden_states)
        else:
            q_states = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(hidden_states)))
        q_states = q_states.view(bsz, q_len, self.num_heads, self.qk_head_dim)
        q_states = q_states.transpose(1, 2)
        q_pass, q_rot = torch.split(
            q_states, [self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1
        )

        # The context's latent and the block's, in the layer's own latent path.
        compressed_kv = self.kv_a_proj_with_mqa(
            torch.cat([target_hidden, hidden_states], dim=1)
        )
        kv_nope, k_rot = torch.split(
            compressed_kv, [self.kv_lora_rank, self.qk_rope_head_dim], dim=-1
        )
        kv_nope = self.kv_a_layernorm(kv_nope).view(bsz, 1, kv_len, self.kv_lora_rank)
        k_rot = k_rot.view(bsz, 1, kv_len, self.qk_rope_head_dim)

        # position_embeddings cover the context and then the block.
        cos, sin = position_embeddings
        q_start = cos.shape[1] - q_len
        q_rot = self._rope(q_rot, cos[:, q_start:], sin[:, q_start:])
        k_rot = self._rope(k_rot, cos, sin)

        if past_key_values is not None:
            kv_nope, k_rot = past_key_values.update(kv_nope, k_rot, self.layer_idx)

        query_states = torch.cat((q_pass, q_rot), dim=-1)
        key_states, value_states = self.expand_kv(kv_nope, k_rot)

        attn_fn: Callable = eager_attention_forward
        if self.config._attn_implementation not in (None, "eager"):  # noqa: SLF001
            attn_fn = ALL_ATTENTION_FUNCTIONS[self.config._attn_implementation]  # noqa: SLF001
        attn_output, attn_weights = attn_fn(
            self,
            query_states,
            key_states,
            value_states,
            attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout,
            scaling=self.scaling,
            **kwargs,
        )
        attn_output = attn_output.reshape(bsz, q_len, self.num_heads * self.v_head_dim)
        return self.o_proj(attn_output), attn_weights


class DeepseekV3DFlashDecoderLayer(Qwen3DFlashDecoderLayer):
    """A DFlash draft layer with MLA attention, DeepSeek-V3 norms and a dense MLP.

    The forward (and its call signature, ``past_key_value`` included) is the Qwen3
    DFlash layer's: pre-norm attention over ``target_hidden`` and the block, then
    a pre-norm MLP, each with its residual. The MLP is dense at every index (the
    verifier's ``first_k_dense_replace`` does not apply to a draft).
    """

    def __init__(self, config: DeepseekV3Config, layer_idx: int):
        GradientCheckpointingLayer.__init__(self)
        self.hidden_size = config.hidden_size
        self.self_attn = DeepseekV3DFlashAttention(config=config, layer_idx=layer_idx)  # type: ignore[assignment]
        self.mlp = DeepseekV3MLP(config)  # type: ignore[assignment]
        self.input_layernorm = DeepseekV3RMSNorm(
            config.hidden_size, eps=config.rms_norm_eps
        )  # type: ignore[assignment]
        self.post_attention_layernorm = DeepseekV3RMSNorm(
            config.hidden_size, eps=config.rms_norm_eps
        )  # type: ignore[assignment]
