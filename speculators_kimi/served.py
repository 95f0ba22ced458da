"""Which draft algorithms vLLM 0.34 serves from a speculators checkpoint.

``export`` writes and ``vllm-check`` loads exactly these, and ``evaluate``
decodes all of them but XPress (:data:`EVALUATED`); the other algorithms
upstream trains are refused by each command with the same reason, from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "BLOCK_ALGORITHMS",
    "EVALUATED",
    "SERVED",
    "SERVE_METHOD",
    "served_tokens",
    "unevaluated_reason",
    "unserved_reason",
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
#: Served, and not decoded by ``evaluate``, with why.
_NOT_EVALUATED = {
    "xpress": "evaluate does not run XPress's Jacobi refinement (vLLM drafts "
    "its block with Triton kernels over the base logits' top-C); export it and "
    "check it with vllm-check, or measure acceptance with vLLM",
}
#: What ``evaluate`` decodes.
EVALUATED = tuple(a for a in SERVED if a not in _NOT_EVALUATED)

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


def unevaluated_reason(algorithm: object) -> str | None:
    """Why ``evaluate`` does not decode a draft of ``algorithm`` (``None`` when
    it does): :func:`unserved_reason`, or why a served one is not decoded."""
    return unserved_reason(algorithm) or _NOT_EVALUATED.get(str(algorithm))
