"""Tiny EAGLE-3 drafts (a Qwen3 layer pair, an MLA layer) and one training step.

Shared by the kernel backend tests and the sequence-parallel kernel probe: the
same draft, batch and step, so a backend or a parallel layout is compared against
exactly what the other tests check.
"""

from __future__ import annotations

from typing import Any

import torch

SEQ_LEN = 64
VOCAB = 96
HIDDEN = 32
TTT_STEPS = 3
# Sliding window of the second draft layer: smaller than every document, so the
# windowed and full layers attend to different keys.
WINDOW = 5


def document_ids() -> torch.Tensor:
    # Three documents of uneven lengths, then padding.
    return torch.tensor([0] * 19 + [1] * 23 + [2] * 14 + [-1] * 8)


def tiny_eagle3(attn_impl: str):
    from transformers import Qwen3Config

    from speculators_kimi.tiny_verifier import TinyVerifierSpec, dense_text
    from speculators_kimi.tiny_verifier.draft import build_eagle3_draft

    # The tiny dense family's shape (4 heads, GQA 2) at HIDDEN, head_dim 8, with a
    # full layer and a windowed one.
    spec = TinyVerifierSpec(hidden_size=HIDDEN, intermediate_size=64, num_layers=2)
    layer_config = Qwen3Config(
        **dense_text(spec=spec, vocab_size=VOCAB, max_position_embeddings=256),
        head_dim=8,
        layer_types=["full_attention", "sliding_attention"],
        use_sliding_window=True,
        sliding_window=WINDOW,
    )
    layer_config._attn_implementation = attn_impl
    return build_eagle3_draft(
        layer_config,
        draft_vocab_size=VOCAB,
        ttt_steps=TTT_STEPS,
        verifier_architecture="Qwen3ForCausalLM",
        std=0.5,
    )


def tiny_mla_eagle3(attn_impl: str):
    """An MLA draft (``--draft-arch deepseek_v3``): q/k heads 24 wide (nope 16 +
    rope 8), v heads 16, YaRN rope whose ``mscale`` changes the softmax scale."""
    from transformers import DeepseekV3Config

    from speculators_kimi.tiny_verifier import KimiTinySpec, mla_text
    from speculators_kimi.tiny_verifier.draft import build_eagle3_draft

    # The tiny Kimi family's MLA shape (4 heads, nope 16, rope 8, v 16) at HIDDEN,
    # without a q LoRA and with YaRN rope.
    spec = KimiTinySpec(
        hidden_size=HIDDEN,
        intermediate_size=64,
        moe_intermediate_size=16,
        num_layers=1,
        max_position_embeddings=256,
    )
    layer_config = DeepseekV3Config(
        **mla_text(spec, vocab_size=VOCAB, q_lora_rank=None, kv_lora_rank=16),
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 64,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
    )
    layer_config._attn_implementation = attn_impl
    return build_eagle3_draft(
        layer_config,
        draft_vocab_size=VOCAB,
        ttt_steps=TTT_STEPS,
        verifier_architecture="DeepseekV3ForCausalLM",
        std=0.5,
    )


def step_batch() -> dict[str, Any]:
    """The packed batch of one training step, with its call arguments."""
    from speculators.losses import resolve_loss_config

    gen = torch.Generator().manual_seed(1)
    doc_ids = document_ids().unsqueeze(0)
    return {
        "hidden_states": torch.randn(1, SEQ_LEN, 3 * HIDDEN, generator=gen),
        "input_ids": torch.randint(0, VOCAB, (1, SEQ_LEN), generator=gen),
        "document_ids": doc_ids,
        "loss_mask": doc_ids != -1,
        "verifier_last_hidden_states": torch.randn(1, SEQ_LEN, HIDDEN, generator=gen),
        "ttt_steps": TTT_STEPS,
        "loss_config": resolve_loss_config("kl_div", "eager"),
    }


def train_step(model: torch.nn.Module, **batch: Any) -> dict[str, torch.Tensor]:
    """Loss and every parameter gradient of one step over ``TTT_STEPS`` steps."""
    _, loss, _ = model(**(batch or step_batch()))
    loss.backward()
    module = getattr(model, "module", model)  # under DDP, the draft's own names
    grads = {
        name: param.grad
        for name, param in module.named_parameters()
        if param.requires_grad
    }
    assert all(grad is not None for grad in grads.values()), "missing gradients"
    return {"loss": loss.detach(), **grads}
