"""How big the draft is and roughly what training it takes: exact parameter
counts (:func:`planned_params`, :func:`draft_params`: the draft built on the
meta device by ``speculators``' own classes) and a memory estimate
(:func:`estimate_memory` for EAGLE-3's test-time training,
:func:`estimate_block_memory` for a block drafter's anchored blocks).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ADAM_STATE_BYTES",
    "DEFAULT_SEQ_LEN",
    "DEFAULT_TTT_STEPS",
    "FP32",
    "draft_params",
    "estimate_block_memory",
    "estimate_memory",
    "planned_params",
]

DEFAULT_SEQ_LEN = 8192
DEFAULT_TTT_STEPS = 3
FP32 = 4
ADAM_STATE_BYTES = 8


def draft_params(
    draft: Any, *, draft_vocab: int, num_aux: int, options: dict[str, Any]
) -> tuple[int, int]:
    """(trainable, frozen) parameters of the whole EAGLE-3 draft ``speculators
    train`` builds for ``draft`` and ``options``, counted on the meta device (its
    own classes: layers, ``fc``, norms, embedding and heads; no tensor read)."""
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3SpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig

    config = Eagle3SpeculatorConfig(
        transformer_layer_config=draft,
        draft_vocab_size=draft_vocab,
        eagle_aux_hidden_state_layer_ids=list(range(num_aux)),
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=1)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(name_or_path=None, architectures=[]),
        ),
        **options,
    )
    return planned_params(config)


def planned_params(planned: Any) -> tuple[int, int]:
    """(trainable, frozen) parameters of the draft of the speculator config
    ``planned`` (any algorithm), built on the meta device by its own class."""
    import torch
    from speculators.model import SpeculatorModel

    model_class = (SpeculatorModel.registry or {})[planned.speculators_model_type]
    with torch.device("meta"):
        model = model_class(planned)
    counts = [0, 0]
    for param in model.parameters():
        counts[not param.requires_grad] += param.numel()
    return counts[0], counts[1]


def _attention_width(draft: Any) -> int:
    """Activations per token of one attention layer (q, k, v, output), floats."""
    heads = int(draft.num_attention_heads)
    if getattr(draft, "kv_lora_rank", None):  # MLA: latents, then expanded heads
        qk = int(draft.qk_nope_head_dim) + int(draft.qk_rope_head_dim)
        v = int(draft.v_head_dim)
        latents = int(draft.q_lora_rank or 0) + int(draft.kv_lora_rank) + qk
        return latents + heads * (2 * qk + 2 * v)
    hidden = int(draft.hidden_size)
    head_dim = int(getattr(draft, "head_dim", None) or hidden // heads)
    return (2 * heads + 2 * int(draft.num_key_value_heads)) * head_dim


def estimate_memory(
    draft: Any,
    *,
    draft_vocab: int,
    options: dict[str, Any],
    seq_len: int = DEFAULT_SEQ_LEN,
    ttt_steps: int = DEFAULT_TTT_STEPS,
    num_aux: int = 3,
    params: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Rough EAGLE-3 training memory (fp32 weights, AdamW), in GiB.

    :param draft: the draft decoder config.
    :param draft_vocab: the draft vocabulary size.
    :param options: the draft's norm options (:func:`.draft.draft_options`).
    :param seq_len: tokens per step (one packed sequence).
    :param ttt_steps: test-time-training steps.
    :param num_aux: auxiliary hidden states fed to the draft.
    :param params: (trainable, frozen) when already counted (doctor counts the
        planned draft: :func:`planned_params`); else counted here.
    :returns: the parts and the total.
    """
    hidden = int(draft.hidden_size)
    inter = int(draft.intermediate_size)
    layers = int(draft.num_hidden_layers)
    # The whole draft, counted exactly from its own classes (on the meta device).
    trainable, frozen = params or draft_params(
        draft, draft_vocab=draft_vocab, num_aux=num_aux, options=options
    )
    inputs = seq_len * (num_aux + 1) * hidden * 2
    logits = ttt_steps * seq_len * draft_vocab * FP32 * 3
    per_token = 4 * hidden + _attention_width(draft) + 2 * inter
    activations = ttt_steps * layers * seq_len * per_token * FP32
    return _summary(
        (trainable, frozen),
        inputs + logits + activations,
        f"fp32 weights + AdamW, seq_len={seq_len}, ttt_steps={ttt_steps}, "
        f"draft_vocab={draft_vocab}, {layers} draft layer(s); rough",
    )


def estimate_block_memory(
    planned: Any, *, draft_vocab: int, seq_len: int, max_anchors: int
) -> dict[str, Any]:
    """Rough training memory of a block drafter (fp32 weights, AdamW), in GiB:
    the context's ``seq_len`` tokens feed every layer's keys and values, and
    ``max_anchors`` blocks of ``block_size`` queries run the layers and the
    head (upstream's DFlash-family forward).

    :param planned: the speculator config training builds
        (:func:`.draft.planned_draft`).
    """
    draft = planned.transformer_layer_config
    hidden = int(draft.hidden_size)
    layers = int(draft.num_hidden_layers)
    block = int(planned.block_size)
    queries = min(max_anchors, seq_len) * block
    num_aux = len(planned.aux_hidden_state_layer_ids)
    inputs = seq_len * (num_aux + 1) * hidden * 2
    logits = queries * draft_vocab * FP32 * 3
    width = _attention_width(draft)
    per_query = 4 * hidden + width + 2 * int(draft.intermediate_size)
    activations = layers * (queries * per_query + seq_len * (hidden + width)) * FP32
    return _summary(
        planned_params(planned),
        inputs + logits + activations,
        f"fp32 weights + AdamW, seq_len={seq_len}, max_anchors={max_anchors}, "
        f"block_size={block}, draft_vocab={draft_vocab}, {layers} draft "
        "layer(s); rough",
    )


def _summary(
    params: tuple[int, int], activation_bytes: int, assumptions: str
) -> dict[str, Any]:
    """The estimate's parts in GiB: weights (trainable and frozen), gradients
    and AdamW's state (trainable), and the step's activations."""
    trainable, frozen = params
    gib = 1024**3
    weights = (trainable + frozen) * FP32
    optimizer = trainable * (FP32 + ADAM_STATE_BYTES)
    total = weights + optimizer + activation_bytes
    return {
        "assumptions": assumptions,
        "trainable_params": trainable,
        "frozen_params": frozen,
        "weights_gib": round(weights / gib, 2),
        "grads_and_optimizer_gib": round(optimizer / gib, 2),
        "activations_and_logits_gib": round(activation_bytes / gib, 2),
        "total_gib": round(total / gib, 2),
    }
