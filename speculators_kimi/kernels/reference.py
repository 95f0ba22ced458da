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

__all__ = ["document_layout", "draft_attention_mask", "draft_attention_reference"]


def document_layout(document_ids: Tensor) -> Tensor:
    """What the kernels know of a packed sequence: int32 ``[5, N]``.

    Rows: the document id; the document's start and end (first and one past the
    last position holding the id: the span its tokens may look back over); the
    start and end of the token's contiguous run of that id (the span where every
    pair is in one document). Padding tokens (id -1) get ``[i, i + 1)`` for both.
    Compute once per batch and pass to ``draft_attention(..., layout=...)`` to
    reuse it across layers and TTT steps.
    """
    if document_ids.dim() != 1:
        raise ValueError(
            f"document_ids must be 1-D [N], got {tuple(document_ids.shape)}"
        )
    ids = document_ids.long()
    n = ids.numel()
    pos = torch.arange(n, device=ids.device, dtype=torch.long)
    if n == 0:
        return torch.empty(5, 0, dtype=torch.int32, device=ids.device)
    _, inverse = torch.unique(ids, return_inverse=True)
    num = int(inverse.max().item()) + 1
    first = torch.full((num,), n, dtype=torch.long, device=ids.device)
    last = torch.full((num,), -1, dtype=torch.long, device=ids.device)
    first = first.scatter_reduce(0, inverse, pos, reduce="amin")
    last = last.scatter_reduce(0, inverse, pos, reduce="amax")
    pad = ids == -1
    new_run = torch.ones_like(pad)
    new_run[1:] = (ids[1:] != ids[:-1]) | pad[1:]
    run_start = torch.where(new_run, pos, 0).cummax(0).values
    ends_run = torch.ones_like(pad)
    ends_run[:-1] = new_run[1:]
    run_end = torch.where(ends_run, pos + 1, n).flip(0).cummin(0).values.flip(0)
    layout = torch.stack(
        (
            ids,
            torch.where(pad, pos, first[inverse]),
            torch.where(pad, pos + 1, last[inverse] + 1),
            run_start,
            run_end,
        )
    )
    return layout.to(torch.int32)


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
