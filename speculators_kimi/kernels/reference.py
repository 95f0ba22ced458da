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

__all__ = ["document_bounds", "draft_attention_mask", "draft_attention_reference"]


def document_bounds(document_ids: Tensor) -> tuple[Tensor, Tensor]:
    """Per-token ``[start, end)`` of its document, int32 ``[N]`` each.

    ``start`` is the first and ``end - 1`` the last position holding the token's
    document id (for the usual contiguous packing: the document's span). Padding
    tokens (id -1) get ``[i, i + 1)``. Compute once per batch and pass to
    ``draft_attention(..., bounds=...)`` to reuse across layers and TTT steps.
    """
    if document_ids.dim() != 1:
        raise ValueError(
            f"document_ids must be 1-D [N], got {tuple(document_ids.shape)}"
        )
    ids = document_ids.long()
    n = ids.numel()
    pos = torch.arange(n, device=ids.device, dtype=torch.long)
    if n == 0:
        empty = torch.empty(0, dtype=torch.int32, device=ids.device)
        return empty, empty
    _, inverse = torch.unique(ids, return_inverse=True)
    num = int(inverse.max().item()) + 1
    first = torch.full((num,), n, dtype=torch.long, device=ids.device)
    last = torch.full((num,), -1, dtype=torch.long, device=ids.device)
    first = first.scatter_reduce(0, inverse, pos, reduce="amin")
    last = last.scatter_reduce(0, inverse, pos, reduce="amax")
    pad = ids == -1
    starts = torch.where(pad, pos, first[inverse])
    ends = torch.where(pad, pos + 1, last[inverse] + 1)
    return starts.to(torch.int32), ends.to(torch.int32)


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
    """Dense reference: ``q [B,Hq,N,d]``, ``k, v [B,Hkv,(t+1)N,d]`` -> ``[B,Hq,N,d]``.

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
