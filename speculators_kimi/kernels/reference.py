"""Dense PyTorch reference of the draft-head TTT attention (the test oracle).

Mask semantics are upstream's ``create_combined_mask_mod`` extended by
``extend_mask_for_draft_tokens`` once per TTT step: query ``q`` (``0 <= q < N``) may
attend key ``kv`` (``0 <= kv < (t+1)N``) iff

    (q >= kv and (W is None or kv > q - W)
        and doc[q] != -1 and doc[q] == doc[kv mod N])
    or kv mod N == q
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

# Its home is .layout (production builds it); kept importable from here.
from .layout import document_layout

__all__ = ["document_layout", "draft_attention_mask", "draft_attention_reference"]


def draft_attention_mask(
    document_ids: Tensor, num_blocks: int, sliding_window: int | None = None
) -> Tensor:
    """Boolean mask ``[N, num_blocks * N]`` (True = attend)."""
    ids = document_ids.long()
    n = ids.numel()
    q = torch.arange(n, device=ids.device).unsqueeze(1)
    kv = torch.arange(num_blocks * n, device=ids.device).unsqueeze(0)
    kv_mod = kv % n
    causal = q >= kv
    if sliding_window is not None:
        causal = causal & (kv > q - sliding_window)
    doc = (ids[q] != -1) & (ids[q] == ids[kv_mod])
    return (causal & doc) | (kv_mod == q)


def draft_attention_reference(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    document_ids: Tensor,
    *,
    scale: float | None = None,
    sliding_window: int | None = None,
) -> Tensor:
    """Dense reference: ``q [B,Hq,N,d_qk]``, ``k [B,Hkv,(t+1)N,d_qk]``,
    ``v [B,Hkv,(t+1)N,d_v]`` -> ``[B,Hq,N,d_v]``; ``scale`` defaults to
    ``1/sqrt(d_qk)``.

    Computes in the inputs' dtype (use fp64 for an oracle); differentiable.
    """
    b, hq, n, d = q.shape
    hkv, kv_len = k.shape[1], k.shape[2]
    if hq % hkv != 0:
        raise ValueError(f"Hq={hq} must be a multiple of Hkv={hkv}")
    if kv_len % n != 0:
        raise ValueError(f"kv length {kv_len} must be a multiple of N={n}")
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    g = hq // hkv
    k = k.repeat_interleave(g, dim=1)
    v = v.repeat_interleave(g, dim=1)
    mask = draft_attention_mask(document_ids, kv_len // n, sliding_window)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.matmul(probs, v)
