"""Which draft algorithms vLLM 0.34 serves from a speculators checkpoint.

``evaluate`` decodes, ``export`` writes and ``vllm-check`` loads exactly these;
the other algorithms upstream trains are refused by each command with the same
reason, from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "BLOCK_ALGORITHMS",
    "SERVED",
    "SERVE_METHOD",
    "served_tokens",
    "unserved_reason",
    "xpress_topc",
    "xpress_unserved_reason",
]

#: The block drafters, and the vLLM ``method`` each is served under (vLLM's
#: ``build_vllm_speculative_config`` maps dflash2 to dflash; XPress's class
#: declares a DFlash speculator config).
SERVE_METHOD = {
    "dflash": "dflash",
    "dflash2": "dflash",
    "dspark": "dspark",
    "xpress": "dflash",
}
BLOCK_ALGORITHMS = tuple(SERVE_METHOD)
#: Every algorithm served: EAGLE-3 chains a token per step, the others a block.
SERVED = ("eagle3", *BLOCK_ALGORITHMS)
#: vLLM's XPress top-C when the draft's config names none (``Qwen3XPressModel``).
_XPRESS_TOPC = 512

#: Why vLLM 0.34 does not serve a draft of these algorithms, and what to train.
_NOT_SERVED = {
    "peagle": "vLLM 0.34 refuses P-EAGLE checkpoints: 'P-EAGLE (parallel drafting "
    "EAGLE-3) is not supported.' (speculators/algos.py update_peagle); train "
    "--speculator-type eagle3 for a draft it serves",
    "mtp": "an MTP draft is decoded by the verifier's own MTP layer in vLLM, "
    "not by a speculators draft",
}


def served_tokens(config: Mapping[str, Any]) -> int:
    """The tokens per step a draft is served with: its proposal method's
    ``speculative_tokens`` (EAGLE-3's chain; a block drafter's block), which
    ``export`` writes into the serving config and ``evaluate`` decodes with."""
    methods = config["speculators_config"]["proposal_methods"]
    return int(methods[0]["speculative_tokens"])


def unserved_reason(algorithm: object) -> str | None:
    """Why a draft whose ``speculators_model_type`` is ``algorithm`` is not
    served (``None`` when it is): vLLM's reason and the fix, or that it is no
    algorithm speculators trains."""
    if algorithm in SERVED:
        return None
    return _NOT_SERVED.get(
        str(algorithm),
        f"speculators_model_type {algorithm!r} is no draft speculators trains "
        f"(served: {', '.join(SERVED)})",
    )


def xpress_topc(vocab_size: int) -> int:
    """The top-C an XPress draft is served with: vLLM's default, capped at the
    vocabulary (vLLM refuses a larger one). ``export`` writes it; ``evaluate``
    drafts with it."""
    return min(_XPRESS_TOPC, vocab_size)


#: The MLP width vLLM's XPress latent kernel steps through, unmasked
#: (``xpress_latent_pass``: ``HT=64``).
_XPRESS_MLP_TILE = 64


def xpress_unserved_reason(config: Mapping[str, Any]) -> str | None:
    """Why vLLM 0.34's XPress (``Qwen3XPressForCausalLM`` and its kernels)
    cannot serve the XPress draft of this checkpoint ``config``, with the fix;
    ``None`` when it can."""
    layer = config.get("transformer_layer_config") or {}
    if layer.get("model_type") != "qwen3":
        return (
            f"the XPress draft has {layer.get('model_type')} layers; vLLM 0.34 "
            "serves XPress only with Qwen3 layers (Qwen3XPressForCausalLM). "
            "Retrain with --draft-arch qwen3"
        )
    vocab = layer.get("vocab_size")
    draft_vocab = config.get("draft_vocab_size") or vocab
    if draft_vocab != vocab:
        return (
            f"the XPress draft has a {draft_vocab}-token draft vocabulary; vLLM "
            f"0.34's Qwen3XPressForCausalLM needs the verifier's ({vocab}): "
            "'XPress currently requires a full-vocab draft (the refiner bias is "
            "defined over the target vocabulary).' Retrain without "
            "--draft-vocab-size"
        )
    if config.get("sample_from_anchor"):
        return (
            "the XPress draft samples from the anchor; vLLM 0.34's "
            "XPressSpeculator refuses it: 'sample_from_anchor=True is not "
            "supported for XPress: the refiner is trained and served in the "
            "fill-in layout'. Retrain without --sample-from-anchor"
        )
    rank = int(config.get("xpress_rank", 256))
    if rank <= 0 or rank & (rank - 1):
        return (
            f"the XPress draft's refiner rank is {rank}; vLLM 0.34's XPress "
            "kernels tile the rank with tl.arange, which takes a power of two. "
            "Retrain with --xpress-rank 256 (or another power of two)"
        )
    hidden = rank * int(config.get("xpress_mlp_ratio", 2))
    if hidden % _XPRESS_MLP_TILE:
        return (
            f"the XPress refiner's MLP is {hidden} wide (rank {rank} x "
            f"xpress_mlp_ratio); vLLM 0.34's XPress kernel reads it "
            f"{_XPRESS_MLP_TILE} columns at a time without a mask, so it would "
            "read past the weights. Retrain with a rank and ratio whose product "
            f"is a multiple of {_XPRESS_MLP_TILE} (the default 256 x 2)"
        )
    return None
