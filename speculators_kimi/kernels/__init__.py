"""Triton draft-head (EAGLE-3 TTT) attention, its PyTorch reference and autograd glue.

Importing this package does not import Triton; the kernels are decorated with
``triton.jit`` at their first launch, so ``TRITON_INTERPRET=1`` may be set any time
before the first call.
"""

from .autograd import draft_attention
from .reference import (
    document_bounds,
    draft_attention_mask,
    draft_attention_reference,
)

__all__ = [
    "document_bounds",
    "draft_attention",
    "draft_attention_mask",
    "draft_attention_reference",
]
