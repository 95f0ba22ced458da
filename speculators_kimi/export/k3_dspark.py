"""An MLA DSpark draft (``--speculator-type dspark --draft-arch deepseek_v3``) as
vLLM 0.34 serves it: the native ``k3_dspark`` layout of ``K3DSparkForCausalLM``
(``vllm/models/kimi_k3/nvidia/dspark_mla.py``, config class ``K3DSparkConfig``).

vLLM's speculators parser builds block-drafter layers as Qwen3 GQA only, so an
MLA DSpark is written the way vLLM's own MLA DSpark checkpoints are: a
DeepSeek-V3-style config with ``model_type`` ``k3_dspark`` and architecture
``K3DSparkModel``, served with ``vllm serve VERIFIER --speculative-config
'{"method": "dspark", "model": EXPORT}'``. What the layout settles:

* **tensor names.** vLLM's ``hf_to_vllm_mapper`` prefixes ``model.`` and stacks
  ``q_a_proj``/``kv_a_proj_with_mqa`` and ``gate_proj``/``up_proj``; the layers'
  names are DeepSeek-V3's, as ours. Ours ``fc`` is its ``context_proj``,
  ``hidden_norm`` its ``context_norm``, ``norm`` its ``final_norm``; the Markov
  head's ``markov_w1``/``markov_w2`` keep their names; the confidence head's
  ``proj`` is loaded only with ``enable_confidence_head``. The embedding and LM
  head are the target's (vLLM shares both; its mapper drops them);
* **aux layers.** ``target_layer_ids`` are the aux layer ids minus one (vLLM adds
  one back: ``get_eagle3_aux_layers_from_config``), with ``num_target_layers``
  and ``target_hidden_size`` for ``context_proj``'s width;
* **what vLLM refuses.** ``K3DSparkConfig`` requires ``draft_vocab_size ==
  vocab_size`` and a ``q_lora_rank``; DSpark serves only the vanilla Markov head
  with a positive rank. Every layer is full attention and bidirectional inside
  the block (training's rule for full-attention layers; vLLM's MLA layer is
  ``non_causal_multi_token_decode``).
"""

from __future__ import annotations

from typing import Any

from .block import check_block_fields, check_markov_head
from .errors import ExportError
from .weights import native_tensors

__all__ = [
    "K3_ARCHITECTURE",
    "K3_CLASS",
    "K3_MODEL_TYPE",
    "is_mla_block_draft",
    "k3_dspark_config",
    "k3_dspark_tensors",
]

K3_MODEL_TYPE = "k3_dspark"
#: The architecture vLLM's registry maps to ``K3DSparkForCausalLM``.
K3_ARCHITECTURE = "K3DSparkModel"
K3_CLASS = "K3DSparkForCausalLM"
_MLA = "deepseek_v3"

#: The layer config's fields K3DSparkConfig (a DeepseekV3Config) reads.
_LAYER_FIELDS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "hidden_act",
    "max_position_embeddings",
    "rms_norm_eps",
    "rope_parameters",
    "rope_interleave",
    "attention_bias",
    "initializer_range",
)

#: Ours -> vLLM's (the name in the checkpoint file, before vLLM's ``model.``).
_RENAMED = {
    "fc.weight": "context_proj.weight",
    "hidden_norm.weight": "context_norm.weight",
    "norm.weight": "final_norm.weight",
}


def is_mla_block_draft(config: dict[str, Any]) -> bool:
    """A DFlash-family draft whose layers are MLA (``--draft-arch deepseek_v3``)."""
    layer = config.get("transformer_layer_config") or {}
    return config.get("speculators_model_type") in (
        "dflash",
        "dflash2",
        "dspark",
    ) and (layer.get("model_type") == _MLA)


def _refuse(config: dict[str, Any]) -> None:
    algorithm = config.get("speculators_model_type")
    if algorithm != "dspark":
        raise ExportError(
            f"an MLA (deepseek_v3) {algorithm} draft: vLLM 0.34 serves DFlash drafts "
            "only with Qwen3 layers (DFlashQwen3ForCausalLM); its MLA block drafter "
            "is DSpark's K3DSparkForCausalLM. Train it with --speculator-type dspark"
        )
    layer = config["transformer_layer_config"]
    vocab = int(layer["vocab_size"])
    draft_vocab = int(config.get("draft_vocab_size") or vocab)
    if draft_vocab != vocab:
        raise ExportError(
            f"the MLA DSpark draft has a {draft_vocab}-token draft vocabulary; "
            f"vLLM's K3DSparkConfig requires draft_vocab_size == vocab_size "
            f"({vocab}): 'MLA DSpark requires draft_vocab_size to equal vocab_size "
            "when sharing the target embedding and LM head.' Retrain without "
            "--draft-vocab-size"
        )
    if layer.get("q_lora_rank") is None:
        raise ExportError(
            "the MLA DSpark draft has no q_lora_rank; vLLM's K3DSparkConfig "
            "refuses it ('MLA DSpark does not support q_lora_rank=None')"
        )
    check_markov_head(config, "vLLM's K3DSparkForCausalLM")
    if not config.get("sample_from_anchor", True):
        raise ExportError(
            "the MLA DSpark draft was trained without sample_from_anchor; vLLM's "
            "K3DSparkForCausalLM drafts with the anchor as the first prediction "
            "position (the anchor block layout). Retrain with --sample-from-anchor"
        )
    check_block_fields(config, "vLLM's K3DSparkConfig")


def _full_layer_config(layer: dict[str, Any]) -> dict[str, Any]:
    """The layer config with every field, defaults included (the checkpoint keeps
    only those that differ from DeepSeek-V3's defaults)."""
    from transformers import AutoConfig

    built = AutoConfig.for_model(**layer)
    return {key: getattr(built, key) for key in _LAYER_FIELDS if hasattr(built, key)}


def k3_dspark_config(config: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's config as vLLM's ``K3DSparkConfig`` reads it.

    :raises ExportError: what vLLM cannot serve (see the module).
    """
    _refuse(config)
    layer = _full_layer_config(config["transformer_layer_config"])
    if not layer.get("rope_interleave", True):
        raise ExportError(
            "the MLA DSpark draft's rope is not interleaved (rope_interleave "
            "false); vLLM's K3 MLA layer ropes interleaved pairs (is_neox_style "
            "False) only"
        )
    aux = [int(i) for i in config["aux_hidden_state_layer_ids"]]
    out: dict[str, Any] = {
        "architectures": [K3_ARCHITECTURE],
        "model_type": K3_MODEL_TYPE,
        **{key: layer[key] for key in _LAYER_FIELDS if key in layer},
        # Dense layers (K3DSparkConfig zeroes the experts itself, said here too).
        "n_routed_experts": 0,
        "n_shared_experts": 0,
        "num_experts_per_tok": 0,
        "first_k_dense_replace": int(layer["num_hidden_layers"]),
        "tie_word_embeddings": False,
        "draft_vocab_size": int(layer["vocab_size"]),
        "target_hidden_size": int(
            config.get("target_hidden_size") or layer["hidden_size"]
        ),
        "target_layer_ids": [i - 1 for i in aux],
        "num_target_layers": len(aux),
        "block_size": int(config["block_size"]),
        "mask_token_id": int(config["mask_token_id"]),
        "sample_from_anchor": True,
        "markov_rank": int(config.get("markov_rank", 256)),
        "markov_head_type": "vanilla",
        "enable_confidence_head": bool(config.get("enable_confidence_head", True)),
        "confidence_head_with_markov": bool(
            config.get("confidence_head_with_markov", True)
        ),
    }
    dtype = config.get("dtype") or config.get("torch_dtype")
    if dtype:
        out["dtype"] = dtype
    return out


def k3_dspark_tensors(
    tensors: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, str]]:
    """The tensors under vLLM's names, and the dropped ones with why."""
    return native_tensors(tensors, lambda name: _RENAMED.get(name, name))
