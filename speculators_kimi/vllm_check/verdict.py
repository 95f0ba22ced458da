"""What fails a ``vllm-check``: the report's findings that mean vLLM would not
serve the draft as it was trained."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["MAX_ABS_CONFIDENCE_DIFF", "MAX_REL_LOGIT_DIFF", "problems"]

#: Largest relative logit difference of one step that passes. Both drafts run in
#: fp32 on CPU on the same inputs: a matching export measures about 1e-7, a wrong
#: causality flag or another checkpoint's weights 1e-2 and up.
MAX_REL_LOGIT_DIFF = 1e-3
#: Largest difference of a DSpark confidence head's outputs (probabilities).
MAX_ABS_CONFIDENCE_DIFF = 1e-3


def problems(report: dict[str, Any]) -> list[str]:
    """Why vLLM would not serve this export as trained, one line each; empty
    when the check passed."""
    found = []
    missing = report.get("parameters_not_loaded") or []
    if missing:
        found.append(f"vLLM's draft has parameters the export did not load: {missing}")
    causality = report.get("causality")
    if causality is not None and not causality["as_trained"]:
        found.append(
            f"vLLM builds the block's attention causality {causality['vllm']}, "
            f"the draft was trained with {causality['trained']}"
        )
    aux = report.get("aux_layers")
    if aux is not None and aux["vllm"] != aux["trained"]:
        found.append(
            f"vLLM reads the verifier's layers {aux['vllm']}, the draft was trained "
            f"on {aux['trained']}"
        )
    serve = report.get("serve") or {}
    k, block = serve.get("num_speculative_tokens"), serve.get("block_size")
    if k is not None and block is not None and k > block:
        found.append(
            f"vLLM would draft {k} tokens per step, past the block of {block} the "
            f"draft was trained on (positions {block + 1}-{k} never were); serve it "
            f"with num_speculative_tokens {block} or fewer"
        )
    xpress_block = serve.get("xpress_block_size")
    if k is not None and xpress_block is not None and k + 1 != xpress_block:
        found.append(
            f"vLLM's XPress would draft 1 + {k} slots per step against a refiner "
            f"trained on blocks of {xpress_block} (nothing in vLLM checks the two "
            f"agree); serve it with num_speculative_tokens {xpress_block - 1}"
        )
    jacobi = report.get("jacobi")
    if jacobi is not None and not jacobi["same"]:
        found.append(
            f"vLLM's XPress drafts the block {jacobi['vllm']}, evaluate's Jacobi "
            f"passes {jacobi['evaluate']} from the same trained draft"
        )
    step = report.get("one_step") or {}
    diff = step.get("max_rel_logit_diff")
    if diff is not None and not (diff <= MAX_REL_LOGIT_DIFF):  # NaN fails too
        found.append(
            f"one step's logits differ from the trained draft's by {diff:.3g} "
            f"(relative; at most {MAX_REL_LOGIT_DIFF:g} passes)"
        )
    for key, what in (
        ("same_argmax", "picks another most likely token"),
        ("same_masked_tokens", "masks out another set of tokens"),
    ):
        if step.get(key) is False:
            found.append(f"in one step, vLLM's draft {what} than the trained draft")
    confidence = step.get("max_abs_confidence_diff")
    if confidence is not None and not (
        confidence <= MAX_ABS_CONFIDENCE_DIFF and math.isfinite(confidence)
    ):
        found.append(
            f"the confidence head's outputs differ by {confidence:.3g} (at most "
            f"{MAX_ABS_CONFIDENCE_DIFF:g} passes)"
        )
    return found
