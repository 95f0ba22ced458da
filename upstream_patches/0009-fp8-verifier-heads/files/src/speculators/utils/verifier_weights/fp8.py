"""FP8 output heads with 128x128 block scales (DeepSeek-V3 / Kimi-K2 checkpoints).

Such a head is stored as ``float8`` with a ``weight_scale_inv`` tensor holding one
scale per 128x128 block; the float head is ``weight * scale`` per block.
"""

import math

import torch

from speculators.utils.verifier_weights.files import TensorHeaders
from speculators.utils.verifier_weights.spec import TensorInfo, VerifierWeightsError

__all__ = ["FP8_BLOCK", "FP8_DTYPES", "dequantize_fp8", "fp8_head_scale"]

FP8_DTYPES: frozenset[str] = frozenset({"F8_E4M3", "F8_E5M2"})
FP8_BLOCK = 128


def fp8_head_scale(headers: TensorHeaders, head: TensorInfo) -> TensorInfo:
    """The block scale of an FP8 head, checked against the head's shape.

    :param headers: the checkpoint's tensor metadata.
    :param head: the FP8 head.
    :return: the ``weight_scale_inv`` tensor next to the head.
    :raises VerifierWeightsError: when it is missing or of the wrong shape.
    """
    module = head.key.rsplit(".", 1)[0]
    scale_key = f"{module}.weight_scale_inv"
    if scale_key not in headers.weight_map:
        raise VerifierWeightsError(
            f"The verifier output head {head.describe()} is FP8 without a "
            f"block scale ('{scale_key}'); this format is not supported."
        )
    scale = headers.info(scale_key)
    rows, cols = head.shape
    blocks = (math.ceil(rows / FP8_BLOCK), math.ceil(cols / FP8_BLOCK))
    if tuple(scale.shape) != blocks:
        raise VerifierWeightsError(
            f"FP8 block scale {scale.describe()} does not match "
            f"{FP8_BLOCK}x{FP8_BLOCK} blocks of the head ({list(blocks)})."
        )
    return scale


def dequantize_fp8(
    weight: torch.Tensor, scale_inv: torch.Tensor, rows: torch.Tensor | None
) -> torch.Tensor:
    """``weight`` (its selected ``rows``) times its block scale, in float32.

    :param weight: the FP8 head, or only its ``rows``.
    :param scale_inv: the block scales of the whole head.
    :param rows: the head rows ``weight`` holds, None for all of them.
    :return: the float32 head.
    """
    row_ids = (
        rows if rows is not None else torch.arange(weight.shape[0], dtype=torch.long)
    )
    row_scale = scale_inv.float()[row_ids // FP8_BLOCK]
    col_scale = row_scale.repeat_interleave(FP8_BLOCK, dim=1)[:, : weight.shape[1]]
    return weight.float() * col_scale
