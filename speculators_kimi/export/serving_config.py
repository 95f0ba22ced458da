"""The exported ``config.json``, in the layout vLLM serves the draft's layers in.

* ``speculators``: the checkpoint's own config with what vLLM 0.33 would infer
  wrongly or not at all written out (``head_dim``, ``draft_vocab_size``,
  ``target_hidden_size``) and the verifier named by its Hub id;
* ``native``: for a DeepSeek-V3 (MLA) draft, the plain DeepSeek config vLLM's
  ``Eagle3DeepseekV3ForCausalLM`` loads (vLLM's speculators parser maps only
  llama/qwen3 layers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import ExportError

__all__ = [
    "MLA_ARCHITECTURE",
    "MLA_LAYER_TYPE",
    "MLA_SERVE_MODEL_TYPE",
    "aux_layer_ids",
    "carried_files",
    "layout_of",
    "mla_serving_config",
    "serving_config",
    "speculators_serving_config",
]

#: The trained draft layer type that vLLM serves with its MLA EAGLE-3 class.
MLA_LAYER_TYPE = "deepseek_v3"
MLA_ARCHITECTURE = "Eagle3DeepseekV3ForCausalLM"
#: The ``model_type`` the native export declares (see :func:`mla_serving_config`).
MLA_SERVE_MODEL_TYPE = "deepseek_v2"

#: DeepSeek-V3 mixture-of-experts and MTP fields: a draft layer is dense and has no
#: MTP layer, so the class defaults its config carries (256 routed experts, 8
#: groups, ...) describe neither it nor the verifier; not written (a null
#: ``n_routed_experts`` would say "dense", but transformers' DeepseekV2Config,
#: which vLLM parses it with, types it int and refuses null).
_MOE_FIELDS = (
    "first_k_dense_replace",
    "n_routed_experts",
    "moe_intermediate_size",
    "moe_layer_freq",
    "n_group",
    "n_shared_experts",
    "norm_topk_prob",
    "num_experts_per_tok",
    "num_nextn_predict_layers",
    "routed_scaling_factor",
    "scoring_func",
    "topk_group",
    "topk_method",
)
#: Token ids the layer config holds as class defaults: the verifier's own, or none.
_TOKEN_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id")


def layout_of(config: dict[str, Any]) -> str:
    """``native`` for a draft with MLA layers or an XPress draft (vLLM's
    speculators parser cannot map them), else ``speculators``."""
    layer_type = (config.get("transformer_layer_config") or {}).get("model_type")
    native = layer_type == MLA_LAYER_TYPE
    return (
        "native"
        if native or config.get("speculators_model_type") == "xpress"
        else "speculators"
    )


def carried_files(layout: str) -> tuple[str, ...]:
    """The checkpoint's other files the export copies when present: ``config.py``
    is the speculators config class, of no use to the native layout."""
    if layout == "native":
        return ("generation_config.json",)
    return ("config.py", "generation_config.json")


def aux_layer_ids(config: dict[str, Any]) -> list[int]:
    """The verifier layers whose states the draft reads; vLLM needs them stated.

    :raises ExportError: the checkpoint's config does not record them.
    """
    ids = config.get("eagle_aux_hidden_state_layer_ids")
    if not ids:
        raise ExportError(
            "config.json has no eagle_aux_hidden_state_layer_ids; reload the "
            "checkpoint with SpeculatorModel.from_pretrained and save it again"
        )
    return [int(i) for i in ids]


def serving_config(
    config: dict[str, Any],
    *,
    verifier_id: str,
    has_input_norm: bool,
    verifier: str | None,
) -> dict[str, Any]:
    """The exported ``config.json`` in the layout of ``config``'s draft layers.

    :param has_input_norm: the checkpoint has an ``input_norm`` before ``fc``.
    :param verifier: a local copy of the verifier (the MLA layout's token ids).
    """
    hidden = int(config["transformer_layer_config"]["hidden_size"])
    if layout_of(config) == "native":
        return mla_serving_config(config, hidden, has_input_norm, verifier)
    return speculators_serving_config(config, verifier_id, hidden)


def speculators_serving_config(
    config: dict[str, Any], verifier_id: str, hidden: int
) -> dict[str, Any]:
    """The checkpoint's config with what vLLM would infer wrongly written out, and
    the verifier named by ``verifier_id``."""
    layer = dict(config["transformer_layer_config"])
    if layer.get("head_dim") is None:
        layer["head_dim"] = layer["hidden_size"] // layer["num_attention_heads"]
    out = dict(config)
    out["transformer_layer_config"] = layer
    out["draft_vocab_size"] = int(config.get("draft_vocab_size") or layer["vocab_size"])
    out["target_hidden_size"] = int(config.get("target_hidden_size") or hidden)
    aux_layer_ids(config)
    spec = dict(config["speculators_config"])
    spec["verifier"] = dict(spec["verifier"], name_or_path=verifier_id)
    out["speculators_config"] = spec
    return out


def _verifier_token_ids(verifier: str | None) -> dict[str, Any]:
    """The verifier's own bos / eos / pad ids (its text config, else its top-level
    config), when a local copy is at hand; else none."""
    if not verifier or not (Path(verifier) / "config.json").is_file():
        return {}
    from speculators.utils.text_config import load_config_dict, text_config_dict

    top = load_config_dict(verifier)
    text = text_config_dict(top)
    return {
        key: text.get(key, top.get(key))
        for key in _TOKEN_FIELDS
        if text.get(key, top.get(key)) is not None
    }


def _check_mla_servable(config: dict[str, Any], has_input_norm: bool) -> None:
    """Refuse an MLA draft vLLM would serve as a different function."""
    if has_input_norm or config.get("norm_before_fc"):
        raise ExportError(
            "the draft was trained with norm_before_fc (an input_norm before fc); "
            f"vLLM's {MLA_ARCHITECTURE} has no input norm before fc, so it would "
            "serve a different function: retrain the draft without --norm-before-fc"
        )
    if not config["transformer_layer_config"].get("rope_interleave", True):
        raise ExportError(
            "the draft's DeepSeek-V3 layer has rope_interleave false; vLLM's MLA "
            "attention applies rotary embeddings interleaved (is_neox_style=False) "
            "only: retrain the draft with rope_interleave true"
        )


def mla_serving_config(
    config: dict[str, Any],
    hidden: int,
    has_input_norm: bool,
    verifier: str | None = None,
) -> dict[str, Any]:
    """The native ``config.json`` vLLM 0.33's ``Eagle3DeepseekV3ForCausalLM``
    reads: the trained DeepSeek-V3 layer config (every MLA field: q/kv LoRA ranks,
    nope/rope/v head dims, ``rope_parameters``, ``rope_interleave``), as the
    top-level config with the EAGLE-3 fields beside it.

    ``model_type`` is ``deepseek_v2`` (same MLA fields; vLLM builds both with
    ``DeepseekV2MLAAttention``), the one value vLLM 0.33's eagle3 path takes as
    an MLA draft: its draft ``hf_overrides`` (``SpeculativeConfig.
    hf_config_override``) rewrite every ``deepseek_v3`` draft config into its MTP
    draft (``DeepSeekMTPModel``, which ``EAGLEConfig`` then names the unregistered
    ``Eagle3DeepSeekMTPModel``), and ``kimi_k2`` is not in the list of EAGLE
    drafts it treats as MLA (``use_mla`` false, vllm#45760).
    The aux layer ids go both top level (vLLM's model runner reads them there)
    and in ``eagle_config`` (where ``DeepseekV2Eagle3Model`` counts them). Only
    fields that describe the draft are written: no mixture-of-experts or MTP
    class defaults (vLLM builds a dense ``DeepseekV2MLP`` for the draft layer
    whatever they say), token ids from the verifier (``verifier``, a local copy)
    or none.
    """
    layer = dict(config["transformer_layer_config"])
    _check_mla_servable(config, has_input_norm)
    aux = aux_layer_ids(config)
    for key in ("architectures", "_name_or_path", *_MOE_FIELDS, *_TOKEN_FIELDS):
        layer.pop(key, None)
    layer.update(_verifier_token_ids(verifier))
    out: dict[str, Any] = {
        "architectures": [MLA_ARCHITECTURE],
        "model_type": MLA_SERVE_MODEL_TYPE,
        **{k: v for k, v in layer.items() if k != "model_type"},
    }
    out["vocab_size"] = int(layer["vocab_size"])  # the target's: d2t maps onto it
    out["draft_vocab_size"] = int(config.get("draft_vocab_size") or layer["vocab_size"])
    out["target_hidden_size"] = int(config.get("target_hidden_size") or hidden)
    out["eagle_aux_hidden_state_layer_ids"] = aux
    out["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": aux}
    for key in ("norm_output", "fc_norm", "norm_before_residual"):
        out[key] = bool(config.get(key, False))
    out["tie_word_embeddings"] = bool(config.get("tie_word_embeddings", False))
    if config.get("dtype") or config.get("torch_dtype"):
        out["dtype"] = config.get("dtype") or config.get("torch_dtype")
    return out
