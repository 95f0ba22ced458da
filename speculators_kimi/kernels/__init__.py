"""Triton draft-head (EAGLE-3 TTT) attention, its PyTorch reference and autograd glue.

Importing this package does not import Triton; the kernels are decorated with
``triton.jit`` at their first launch, so ``TRITON_INTERPRET=1`` may be set any time
before the first call.

Modules: ``jit`` (JIT, interpreter and launch set-up), ``configs`` (tile sizes),
``tiles`` (the ``triton.jit`` helpers), ``forward`` and ``backward`` (the kernels
and their launchers), ``autograd`` (``draft_attention``), ``layout`` (the document
layout table, built once per batch), ``reference`` (the dense oracle), ``backend``
(``--draft-attn-impl triton``), ``cross_compile`` (static sm_90 build report).
"""

from .autograd import draft_attention
from .layout import document_layout
from .reference import draft_attention_mask, draft_attention_reference

__all__ = [
    "document_layout",
    "draft_attention",
    "draft_attention_mask",
    "draft_attention_reference",
]
