"""Autograd glue and the public ``draft_attention`` entry point."""

from __future__ import annotations

import math
import operator
from typing import Any

import torch
from torch import Tensor

from .layout import document_layout

__all__ = ["DraftAttentionFunction", "draft_attention"]

_SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

#: Widest q/k or v head the kernels hold in one tile (padded to a power of two).
MAX_HEAD_DIM = 256


def _check_device(q: Tensor) -> None:
    from .jit import interpreting

    if q.device.type == "cpu" and not interpreting():
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
        layout: Tensor,
        scale: float,
        sliding_window: int | None,
    ) -> Tensor:
        from .forward import run_forward

        o, lse = run_forward(q, k, v, layout, scale, sliding_window)
        ctx.save_for_backward(q, k, v, o, lse, layout)
        ctx.scale = scale
        ctx.sliding_window = sliding_window
        return o

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Tensor) -> tuple[Tensor | None, ...]:
        from .backward import run_backward

        (do,) = grad_outputs
        q, k, v, o, lse, layout = ctx.saved_tensors
        do = do.contiguous()
        if do.dtype != q.dtype:
            do = do.to(q.dtype)
        dq, dk, dv = run_backward(
            do, q, k, v, o, lse, layout, ctx.scale, ctx.sliding_window
        )
        return dq, dk, dv, None, None, None


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
    layout: Tensor | None = None,
) -> Tensor:
    """Draft-head TTT attention (EAGLE-3), fused Triton forward and backward.

    Args:
        q: ``[B, Hq, N, d_qk]`` queries of TTT step ``t``.
        k: ``[B, Hkv, (t+1)N, d_qk]`` keys of steps ``0..t`` concatenated along dim 2.
        v: ``[B, Hkv, (t+1)N, d_v]`` values, same layout; ``d_v`` may differ from
            ``d_qk`` (multi-head latent attention: 128 and 192 in DeepSeek-V3).
        document_ids: ``[N]`` int document id per token, -1 for padding (shared by
            the batch).
        scale: softmax scale, default ``1/sqrt(d_qk)`` (MLA passes its YaRN-scaled
            one).
        sliding_window: ``W``: block 0 keys with ``kv > q - W`` only.
        layout: optional ``document_layout(document_ids)`` computed once per batch.

    Query ``q`` attends key ``kv`` iff ``(q >= kv and (W is None or kv > q - W) and
    doc[q] != -1 and doc[q] == doc[kv mod N]) or kv mod N == q``.

    Returns ``[B, Hq, N, d_v]`` in ``q``'s dtype (the autocast dtype under
    autocast, as for sdpa); differentiable w.r.t. q, k, v.
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("q, k, v must be 4-D [B, H, L, d]")
    b, hq, n, d_qk = q.shape
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} differ")
    if k.shape[0] != b or k.shape[3] != d_qk:
        raise ValueError(f"k {tuple(k.shape)} does not match q {tuple(q.shape)}")
    hkv, kv_len, d_v = k.shape[1], k.shape[2], v.shape[3]
    if hkv == 0 or hq % hkv != 0:
        raise ValueError(f"Hq={hq} must be a multiple of Hkv={hkv}")
    if n == 0 or kv_len % n != 0 or kv_len == 0:
        raise ValueError(f"kv length {kv_len} must be a positive multiple of N={n}")
    for name, dim in (("q/k", d_qk), ("v", d_v)):
        if not 1 <= dim <= MAX_HEAD_DIM:
            raise ValueError(
                f"{name} head dim {dim} unsupported: the kernels take "
                f"1..{MAX_HEAD_DIM} (the 'triton' draft attention backend: this "
                f"draft's {name} heads "
                f"are {dim} wide; train it with --draft-attn-impl sdpa, or "
                "simple_flex_attention on a GPU)"
            )
    if torch.is_autocast_enabled(q.device.type):
        # as autocast runs sdpa: every input in the autocast dtype (an MLA layer's
        # keys are built in its latent's dtype, its values by a linear layer)
        dtype = torch.get_autocast_dtype(q.device.type)
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    if q.dtype not in _SUPPORTED_DTYPES:
        raise TypeError(f"draft_attention supports fp32/fp16/bf16, got {q.dtype}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError("q, k, v must share a dtype")
    if document_ids.shape != (n,):
        raise ValueError(
            f"document_ids must be [N]={n}, got {tuple(document_ids.shape)}"
        )
    if sliding_window is not None:
        try:
            sliding_window = operator.index(sliding_window)
        except TypeError:
            raise TypeError(
                f"sliding_window must be an integer, got {sliding_window!r}"
            ) from None
        if sliding_window < 1:
            raise ValueError("sliding_window must be >= 1")
        if sliding_window >= n:
            # every key of block 0 is inside it: the same mask as none, and a
            # window near 2**31 would overflow the kernels' int32 key bounds
            sliding_window = None
    _check_device(q)
    if scale is None:
        scale = 1.0 / math.sqrt(d_qk)
    if layout is None:
        layout = document_layout(document_ids)
    layout = layout.to(device=q.device, dtype=torch.int32).contiguous()
    # kernels need a unit stride on the head dim only
    q = q if q.stride(-1) == 1 else q.contiguous()
    k = k if k.stride(-1) == 1 else k.contiguous()
    v = v if v.stride(-1) == 1 else v.contiguous()
    out: Tensor = DraftAttentionFunction.apply(
        q, k, v, layout, float(scale), sliding_window
    )
    return out
