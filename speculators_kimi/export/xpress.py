"""An XPress draft (``--speculator-type xpress``) as vLLM 0.34 serves it: the
native layout of ``Qwen3XPressForCausalLM`` (``qwen3_xpress.py``), driven by its
``XPressSpeculator``.

vLLM's speculators parser has no ``xpress`` algorithm, so the draft is written
the way vLLM's own XPress checkpoints are: a Qwen3 ``config.json`` with
architecture ``Qwen3XPressModel``, served with ``vllm serve VERIFIER
--speculative-config '{"method": "dflash", "model": EXPORT,
"num_speculative_tokens": B - 1}'`` (the class declares ``XPressSpeculatorConfig``,
a DFlash config, so method ``dflash`` selects the XPress speculator; ``xpress``
is no method vLLM knows). What the layout settles:

* **the block.** vLLM drafts ``1 + num_speculative_tokens`` slots (the anchor,
  then the proposals: upstream's fill-in layout) and sizes the refiner's mixer
  by ``xpress_block_size``; nothing checks one against the other, so both are
  written (``num_speculative_steps`` = block - 1) and the serve line names the
  same count. ``num_jacobi_passes`` is its ``xpress_num_passes``;
* **tensor names.** The backbone keeps upstream's DFlash names (vLLM prefixes
  ``model.``); the refiner head is ``xpress_head.``: ``token_embed`` is its
  ``w1``, ``readout`` its ``w2``, ``mlp_gate/up/down`` its
  ``mlp.gate_proj/up_proj/down_proj``, and the raw mixer ``mix_l`` its
  ``mix.L``, which vLLM folds into ``tril(L) + I`` after loading: training's
  ``x + tril(L) x``. The embedding and head are the target's (vLLM shares both
  when the draft ships none);
* **aux layers and the mask.** ``dflash_config.target_layer_ids`` are the aux
  layer ids minus one (vLLM adds one back), ``dflash_config.mask_token_id`` the
  mask slots' token;
* **causality inside the block**, as trained: ``is_causal`` when every layer was
  trained alike, else vLLM's layer-type rule (causal exactly for sliding
  layers), which is training's (:func:`.block.trained_causality`);
* **top-C.** vLLM scores each Jacobi pass on the base logits' top ``xpress_topc``
  candidates (its default 512; 0: the whole vocabulary, the exact fixed point
  training's consistency rounds iterate). The export writes vLLM's default
  explicitly (capped at the vocabulary); ``--speculative-config`` may override
  it.

What vLLM refuses: a reduced draft vocabulary (``'XPress currently requires a
full-vocab draft'``), ``sample_from_anchor`` (its speculator serves only the
fill-in layout), MLA draft layers (the class is Qwen3 only), and a refiner its
Triton kernels cannot run: a rank that is not a power of two (tiled with
``tl.arange``), an MLP width that is not a multiple of 64 (stepped through 64
columns at a time, unmasked) (:func:`speculators_kimi.served.xpress_unserved_reason`).
"""

from __future__ import annotations

from typing import Any

from ..served import xpress_topc, xpress_unserved_reason
from .block import BlockCausality, causality_by_layer_type, check_block_fields
from .errors import ExportError
from .weights import native_tensors

__all__ = [
    "XPRESS_ARCHITECTURE",
    "XPRESS_CLASS",
    "is_xpress_export",
    "xpress_config",
    "xpress_tensors",
]

#: The architecture vLLM's registry maps to ``Qwen3XPressForCausalLM``.
XPRESS_ARCHITECTURE = "Qwen3XPressModel"
XPRESS_CLASS = "Qwen3XPressForCausalLM"

#: Upstream's refiner names -> vLLM's (under ``xpress_head.``).
_REFINER = {
    "token_embed.weight": "w1.weight",
    "mix_l": "mix.L",
    "mlp_gate.weight": "mlp.gate_proj.weight",
    "mlp_up.weight": "mlp.up_proj.weight",
    "mlp_down.weight": "mlp.down_proj.weight",
    "readout.weight": "w2.weight",
}
_OURS_REFINER = "refiner_head."


def is_xpress_export(config: dict[str, Any]) -> bool:
    """An export of this module (read back by ``vllm-check``)."""
    return config.get("architectures") == [XPRESS_ARCHITECTURE]


def _refuse(config: dict[str, Any]) -> None:
    why = xpress_unserved_reason(config)
    if why is not None:
        raise ExportError(why)
    check_block_fields(config, "vLLM's Qwen3XPressForCausalLM")


def xpress_config(config: dict[str, Any]) -> tuple[dict[str, Any], BlockCausality]:
    """The checkpoint's config as vLLM's ``Qwen3XPressForCausalLM`` reads it,
    and the causality it encodes.

    :raises ExportError: what vLLM cannot serve (see the module).
    """
    _refuse(config)
    causality = causality_by_layer_type(config)
    layer = dict(config["transformer_layer_config"])
    if layer.get("head_dim") is None:
        layer["head_dim"] = layer["hidden_size"] // layer["num_attention_heads"]
    layer.pop("is_causal", None)
    block = int(config["block_size"])
    rank = int(config.get("xpress_rank", 256))
    vocab = int(layer["vocab_size"])
    out: dict[str, Any] = {
        **layer,
        "architectures": [XPRESS_ARCHITECTURE],
        "model_type": "qwen3",
        "tie_word_embeddings": False,
        "draft_vocab_size": vocab,
        "target_hidden_size": int(
            config.get("target_hidden_size") or layer["hidden_size"]
        ),
        "sample_from_anchor": False,
        "dflash_config": {
            "mask_token_id": int(config["mask_token_id"]),
            "target_layer_ids": [
                int(i) - 1 for i in config["aux_hidden_state_layer_ids"]
            ],
            "use_aux_hidden_state": True,
        },
        "xpress_block_size": block,
        "num_speculative_steps": block - 1,
        "xpress_rank": rank,
        "xpress_mlp_hidden": rank * int(config.get("xpress_mlp_ratio", 2)),
        "xpress_num_passes": int(config.get("num_jacobi_passes", 6)),
        "xpress_topc": xpress_topc(vocab),
    }
    if causality.is_causal is not None:
        out["is_causal"] = causality.is_causal
    dtype = config.get("dtype") or config.get("torch_dtype")
    if dtype:
        out["dtype"] = dtype
    return out, causality


def _vllm_name(name: str) -> str:
    """Ours -> the name ``Qwen3XPressForCausalLM.load_weights`` reads."""
    if not name.startswith(_OURS_REFINER):
        return name
    own = name[len(_OURS_REFINER) :]
    return "xpress_head." + _REFINER.get(own, own)


def xpress_tensors(
    tensors: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, str]]:
    """The tensors under vLLM's names, and the dropped ones with why."""
    return native_tensors(tensors, _vllm_name)
