"""The block drafters (``dflash``, ``dflash2``, ``dspark``) as vLLM 0.34 serves
them, and the algorithms it refuses.

vLLM 0.34 parses these speculators configs itself
(``vllm/transformers_utils/configs/speculators/algos.py``) and builds every draft
layer as Qwen3 GQA (``DFlashQwen3ForCausalLM``, ``DFlash2Qwen3ForCausalLM``,
``Qwen3DSparkForCausalLM``). What the export settles, because vLLM would read it
otherwise than training did:

* **each layer's causality inside the block.** Training (upstream's
  ``create_anchor_block_mask_mod``) makes a full-attention layer bidirectional
  inside the block and a sliding-window layer causal unless
  ``sliding_window_non_causal``. vLLM resolves one flag per layer in
  ``qwen3_dflash._dflash_layer_causal``: the layer config's ``is_causal`` if
  set, else ``dflash_config.causal``, which its parser sets for every dflash
  and dflash2 layer to ``not sliding_window_non_causal``, else (DSpark, whose
  parser sets no ``dflash_config``) causal exactly for ``sliding_attention``
  layers. The export writes ``is_causal`` when every layer was trained alike;
  a mix (causal sliding layers beside bidirectional full ones) is left to the
  layer types for DSpark and refused for DFlash, which has no per-layer form;
* the fields vLLM defaults otherwise than upstream: ``sample_from_anchor``
  (vLLM: false, upstream DSpark: true), ``enable_confidence_head`` and
  ``confidence_head_with_markov`` (vLLM: false, upstream: true), DFlash2's
  ``conv_*`` / ``selector_*`` (vLLM reads them without a default);
* what vLLM cannot serve: DSpark's gated or RNN Markov heads or rank 0 (its
  ``Qwen3DSparkForCausalLM`` holds only the vanilla ``markov_w1``/``markov_w2``
  head), DFlash with ``sample_from_anchor``, a draft without ``mask_token_id``.

XPress is written in vLLM's native layout (:mod:`.xpress`); P-EAGLE and MTP
are refused with vLLM's reason (:mod:`speculators_kimi.served`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..served import served_tokens, unserved_reason
from .errors import ExportError

__all__ = [
    "BlockCausality",
    "block_serving_config",
    "causality_by_layer_type",
    "check_block_fields",
    "check_markov_head",
    "refuse_unservable",
    "trained_causality",
]

_SLIDING = "sliding_attention"


def refuse_unservable(algorithm: str | None, where: str) -> None:
    """Refuse, with vLLM's reason, an algorithm vLLM 0.34 cannot serve.

    :raises ExportError: ``algorithm`` is not one :mod:`..served` lists.
    """
    why = unserved_reason(algorithm)
    if why is not None:
        raise ExportError(f"{where}: {algorithm} draft: {why}")


@dataclass(frozen=True)
class BlockCausality:
    """Each draft layer's causality inside the block as trained, and how the
    export makes vLLM resolve the same.

    :param layers: per layer, whether training masked it causally in the block.
    :param is_causal: the ``is_causal`` written into the layer config (None: not
        written, vLLM's layer-type rule already gives ``layers``).
    """

    layers: tuple[bool, ...]
    is_causal: bool | None


def _layer_types(layer: dict[str, Any]) -> list[str]:
    """The layer types upstream's draft reads: the layer config built as
    upstream builds it (``AutoConfig.for_model``), which fills ``layer_types``
    in when the file has none."""
    from transformers import AutoConfig

    built = AutoConfig.for_model(**layer)
    types = getattr(built, "layer_types", None)
    return (
        list(types) if types else ["full_attention"] * int(layer["num_hidden_layers"])
    )


def trained_causality(config: dict[str, Any]) -> tuple[bool, ...]:
    """Per draft layer, whether training masked the block causally: a sliding
    layer is causal unless ``sliding_window_non_causal``; a full-attention layer
    is always bidirectional (upstream's ``create_anchor_block_mask_mod``)."""
    non_causal = bool(config.get("sliding_window_non_causal", False))
    types = _layer_types(config["transformer_layer_config"])
    return tuple(t == _SLIDING and not non_causal for t in types)


def causality_by_layer_type(config: dict[str, Any]) -> BlockCausality:
    """The causality as trained, for a vLLM class that takes ``is_causal`` or,
    without it and without ``dflash_config.causal``, its layer-type rule:
    causal exactly for sliding layers, which is what training did when the
    layers differ (``sliding_window_non_causal`` false is the only way to get a
    mix). DSpark's and XPress's exports."""
    layers = trained_causality(config)
    return BlockCausality(layers, layers[0] if len(set(layers)) == 1 else None)


def _causality(config: dict[str, Any], algorithm: str) -> BlockCausality:
    if algorithm == "dspark":
        return causality_by_layer_type(config)
    layers = trained_causality(config)
    if len(set(layers)) == 1:
        return BlockCausality(layers, layers[0])
    causal = [i for i, c in enumerate(layers) if c]
    bidirectional = [i for i, c in enumerate(layers) if not c]
    raise ExportError(
        f"the draft's layers {causal} were trained causal inside the block "
        f"(sliding_attention, sliding_window_non_causal false) and layers "
        f"{bidirectional} bidirectional (full attention); vLLM 0.34's DFlash gives "
        "every layer one causality (dflash_config.causal = not "
        "sliding_window_non_causal, or the layer config's is_causal), so it "
        "cannot serve this draft as trained: retrain with one layer type, or with "
        "--sliding-window-non-causal"
    )


def check_block_fields(config: dict[str, Any], reader: str) -> None:
    """Refuse a block drafter's config without what ``reader`` (the vLLM code
    that reads the export) needs: the mask token and the aux layers.

    :raises ExportError: naming the missing field.
    """
    if config.get("mask_token_id") is None:
        raise ExportError(
            f"config.json has no mask_token_id; {reader} requires it (the token "
            "the draft's mask slots are embedded as): pass the one it was "
            "trained with (--mask-token-id) and save the checkpoint again"
        )
    if not config.get("aux_hidden_state_layer_ids"):
        raise ExportError(
            f"config.json has no aux_hidden_state_layer_ids; {reader} requires "
            "them (the verifier layers the draft reads)"
        )


def check_markov_head(config: dict[str, Any], served_by: str, why: str = "") -> None:
    """Refuse a DSpark Markov head that vLLM's DSpark class ``served_by`` cannot
    hold (it has only the vanilla head's weights); ``why`` quotes its own check."""
    rank = int(config.get("markov_rank", 256))
    head = config.get("markov_head_type", "vanilla")
    if rank <= 0 or head != "vanilla":
        raise ExportError(
            f"the DSpark draft has markov_head_type {head!r}, markov_rank {rank}; "
            f"{served_by} holds only the vanilla Markov head "
            f"(markov_w1, markov_w2) with a positive rank{why}: retrain with "
            "--markov-head-type vanilla and --markov-rank > 0"
        )


def _check_dspark(config: dict[str, Any]) -> None:
    check_markov_head(
        config,
        "vLLM 0.34's Qwen3DSparkForCausalLM",
        " (its own check: 'DSpark currently requires markov_head_type=vanilla', "
        "'requires a positive integer markov_rank')",
    )


def _check_dflash(config: dict[str, Any], algorithm: str) -> None:
    if config.get("sample_from_anchor"):
        raise ExportError(
            f"the {algorithm} draft samples from the anchor; vLLM 0.34's "
            "DFlashSpeculator refuses it: 'sample_from_anchor=True is not "
            "supported for DFlash. DFlash uses a fixed 1+N query layout where "
            "the anchor is the bonus token.' Retrain without --sample-from-anchor"
        )
    if algorithm == "dflash2":
        k = served_tokens(config)
        if k + 1 != int(config["block_size"]):
            raise ExportError(
                f"speculative_tokens {k} with block_size {config['block_size']}: "
                "vLLM's DFlash2 convolves over blocks of 1 + num_speculative_tokens "
                "rows, which must be the block size it was trained on"
            )


#: Fields vLLM reads without upstream's default (written out explicitly), with
#: upstream's defaults.
_EXPLICIT: dict[str, dict[str, Any]] = {
    "dflash": {"sample_from_anchor": False, "sliding_window_non_causal": False},
    "dflash2": {
        "sample_from_anchor": False,
        "sliding_window_non_causal": True,
        "conv_kernel_size": 2,
        "conv_group_size": 16,
        "selector_rank": 256,
        "selector_top_k": 16,
    },
    "dspark": {
        "sample_from_anchor": True,
        "sliding_window_non_causal": False,
        "markov_rank": 256,
        "markov_head_type": "vanilla",
        "enable_confidence_head": True,
        "confidence_head_with_markov": True,
    },
}


def block_serving_config(
    config: dict[str, Any], verifier_id: str
) -> tuple[dict[str, Any], BlockCausality]:
    """The checkpoint's config as vLLM 0.34 serves the block drafter it holds,
    and the causality it encodes.

    :raises ExportError: what vLLM cannot serve as trained (see the module).
    """
    algorithm = str(config["speculators_model_type"])
    check_block_fields(config, "vLLM's parser")
    if algorithm == "dspark":
        _check_dspark(config)
    else:
        _check_dflash(config, algorithm)
    causality = _causality(config, algorithm)
    layer = dict(config["transformer_layer_config"])
    if layer.get("head_dim") is None:
        layer["head_dim"] = layer["hidden_size"] // layer["num_attention_heads"]
    layer.pop("is_causal", None)
    if causality.is_causal is not None:
        layer["is_causal"] = causality.is_causal
    out = dict(config)
    out["transformer_layer_config"] = layer
    for key, default in _EXPLICIT[algorithm].items():
        out[key] = config[key] if config.get(key) is not None else default
    out["draft_vocab_size"] = int(config.get("draft_vocab_size") or layer["vocab_size"])
    out["target_hidden_size"] = int(
        config.get("target_hidden_size") or layer["hidden_size"]
    )
    out["aux_hidden_state_layer_ids"] = [
        int(i) for i in config["aux_hidden_state_layer_ids"]
    ]
    spec = dict(config["speculators_config"])
    spec["verifier"] = dict(spec["verifier"], name_or_path=verifier_id)
    out["speculators_config"] = spec
    return out, causality
