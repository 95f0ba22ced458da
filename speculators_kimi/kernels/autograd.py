"""Autograd glue and the public ``draft_attention`` entry point."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from .reference import document_bounds

__all__ = ["DraftAttentionFunction", "draft_attention"]

_SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _interpreting() -> bool:
    from .forward import interpreting

    return interpreting()


def _check_device(q: Tensor) -> None:
    if q.device.type == "cpu" and not _interpreting():
        raise RuntimeError(
            "draft_attention (the 'triton' draft attention backend) needs a GPU; on "
            "CPU use the 'sdpa' or 'eager' attention backend (or set "
            "TRITON_INTERPRET=1 to run the Triton interpreter, for tests only)."
        )


class DraftAttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        doc: Tensor,
        starts: Tensor,
        ends: Tensor,
        scale: float,
        sliding_window: int | None,
    ) -> Tensor:
        from .forward import run_forward

        o, lse = run_forward(q, k, v, doc, starts, scale, sliding_window)
        ctx.save_for_backward(q, k, v, o, lse, doc, starts, ends)
        ctx.scale = scale
        ctx.sliding_window = sliding_window
        return o

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Tensor) -> tuple[Tensor | None, ...]:
        from .backward import run_backward

        (do,) = grad_outputs
        q, k, v, o, lse, doc, starts, ends = ctx.saved_tensors
        do = do.contiguous()
        if do.dtype != q.dtype:
            do = do.to(q.dtype)
        dq, dk, dv = run_backward(
            do, q, k, v, o, lse, doc, starts, ends, ctx.scale, ctx.sliding_window
        )
        return dq, dk, dv, None, None, None, None, None


# Kept out of torch.compile graphs (upstream compiles the draft forward on CUDA):
# dynamo runs it eagerly behind a graph break; the kernels are the same either way.
@torch.compiler.disable
def draft_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    document_ids: Tensor,
    *,
    scale: float | None = None,
    sliding_window: int | None = None,
    bounds: tuple[Tensor, Tensor] | None = None,
) -> Tensor:
    """Draft-head TTT attention (EAGLE-3), fused Triton forward and backward.

    Args:
        q: ``[B, Hq, N, d]`` queries of TTT step ``t``.
        k: ``[B, Hkv, (t+1)N, d]`` keys of steps ``0..t`` concatenated along dim 2.
        v: ``[B, Hkv, (t+1)N, d]`` values, same layout.
        document_ids: ``[N]`` int document id per token, -1 for padding (shared by
            the batch).
        scale: softmax scale, default ``1/sqrt(d)``.
        sliding_window: ``W``: block 0 keys with ``kv > q - W`` only.
        bounds: optional ``document_bounds(document_ids)`` precomputed once per batch.

    Query ``q`` attends key ``kv`` iff ``(q >= kv and (W is None or kv > q - W) and
    doc[q] != -1 and doc[q] == doc[kv mod N]) or kv mod N == q``.

    Returns ``[B, Hq, N, d]`` in ``q``'s dtype; differentiable w.r.t. q, k, v.
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("q, k, v must be 4-D [B, H, L, d]")
    b, hq, n, d = q.shape
    if k.shape != v.shape:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} differ")
    if k.shape[0] != b or k.shape[3] != d:
        raise ValueError(f"k {tuple(k.shape)} does not match q {tuple(q.shape)}")
    hkv, kv_len = k.shape[1], k.shape[2]
    if hkv == 0 or hq % hkv != 0:
        raise ValueError(f"Hq={hq} must be a multiple of Hkv={hkv}")
    if n == 0 or kv_len % n != 0 or kv_len == 0:
        raise ValueError(f"kv length {kv_len} must be a positive multiple of N={n}")
    if d < 1 or d > 256:
        raise ValueError(f"head dim {d} unsupported (1..256)")
    if q.dtype not in _SUPPORTED_DTYPES:
        raise TypeError(f"draft_attention supports fp32/fp16/bf16, got {q.dtype}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError("q, k, v must share a dtype")
    if document_ids.shape != (n,):
        raise ValueError(
            f"document_ids must be [N]={n}, got {tuple(document_ids.shape)}"
        )
    if sliding_window is not None and sliding_window < 1:
        raise ValueError("sliding_window must be >= 1")
    _check_device(q)
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    doc = document_ids.to(device=q.device, dtype=torch.int32).contiguous()
    if bounds is None:
        bounds = document_bounds(doc)
    starts = bounds[0].to(device=q.device, dtype=torch.int32).contiguous()
    ends = bounds[1].to(device=q.device, dtype=torch.int32).contiguous()
    # kernels need a unit stride on the head dim only
    q = q if q.stride(-1) == 1 else q.contiguous()
    k = k if k.stride(-1) == 1 else k.contiguous()
    v = v if v.stride(-1) == 1 else v.contiguous()
    out: Tensor = DraftAttentionFunction.apply(
        q, k, v, doc, starts, ends, float(scale), sliding_window
    )
    return out
