"""Triton forward kernel of the draft-head TTT attention.

Per (query tile, query head): block 0 runs as FlashAttention tiles over the keys a
row of the tile can see, the per-element mask only on edge tiles
(``tiles.query_tile_keys``); then each diagonal block ``j = 1..t`` contributes one
dot product per row, merged into the same online softmax. Stores O and the base-2
log-sum-exp (``LSE2 = log2(sum_j 2^(s_j))`` with ``s = scale * log2(e) * q.k``),
fp32. The q/k head dim ``D_QK`` and the v head dim ``D_V`` may differ (MLA).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .configs import LaunchShape
from .jit import lazy_jit, row_strides
from .tiles import (
    DOC,
    head,
    key_tile,
    layout_row,
    load_diagonal,
    load_rows,
    online_softmax_update,
    query_tile_keys,
    store_rows,
)

__all__ = ["run_forward"]


@triton.jit
def _block0(
    acc,
    l_i,
    m_i,
    q,
    rows,
    doc_q,
    k_base,
    v_base,
    skn,
    svn,
    LAYOUT,
    lo,
    hi,
    N,
    WINDOW,
    qk_scale,
    D_QK: tl.constexpr,
    D_V: tl.constexpr,
    BLOCK_QK: tl.constexpr,
    BLOCK_V: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    MASKED: tl.constexpr,
    COMPUTE: tl.constexpr,
    PREC: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Block-0 key tiles ``[lo, hi)`` into the online softmax of ``rows``."""
    for start_n in range(lo, hi, BLOCK_N):
        s, _, v = key_tile(
            q, rows, doc_q, k_base, v_base, skn, svn, LAYOUT, start_n, N, WINDOW,
            qk_scale, D_QK, D_V, BLOCK_QK, BLOCK_V, HAS_WINDOW, MASKED, COMPUTE,
            PREC, BLOCK_N,
        )  # fmt: skip
        m_i, m_safe, alpha = online_softmax_update(m_i, tl.max(s, axis=1))
        p = tl.math.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(COMPUTE), v, input_precision=PREC)
    return acc, l_i, m_i


def _fwd_kernel(
    Q,
    K,
    V,
    Out,
    LSE,
    LAYOUT,
    sqb,
    sqh,
    sqn,
    skb,
    skh,
    skn,
    svb,
    svh,
    svn,
    sob,
    soh,
    son,
    N,
    HQ,
    NUM_BLOCKS,
    WINDOW,
    qk_scale,
    D_QK: tl.constexpr,
    D_V: tl.constexpr,
    BLOCK_QK: tl.constexpr,
    BLOCK_V: tl.constexpr,
    GROUP: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    COMPUTE: tl.constexpr,
    PREC: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // HQ
    h = pid_bh % HQ
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_valid = rows < N
    q_base = head(Q, b, h, sqb, sqh)
    k_base = head(K, b, h // GROUP, skb, skh)
    v_base = head(V, b, h // GROUP, svb, svh)

    q = load_rows(q_base, rows, sqn, row_valid, D_QK, BLOCK_QK, COMPUTE)
    doc_q = layout_row(LAYOUT, DOC, rows, row_valid, N, -1)
    lo, full_lo, full_hi, hi = query_tile_keys(
        LAYOUT, rows, row_valid, N, WINDOW, HAS_WINDOW, BLOCK_M, BLOCK_N
    )
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_V], dtype=tl.float32)
    # block 0: the left edge (document start, window edge), the interior without
    # the per-element mask, then the tiles on the diagonal
    acc, l_i, m_i = _block0(
        acc, l_i, m_i, q, rows, doc_q, k_base, v_base, skn, svn, LAYOUT, lo,
        full_lo, N, WINDOW, qk_scale, D_QK, D_V, BLOCK_QK, BLOCK_V, HAS_WINDOW,
        True, COMPUTE, PREC, BLOCK_N,
    )  # fmt: skip
    acc, l_i, m_i = _block0(
        acc, l_i, m_i, q, rows, doc_q, k_base, v_base, skn, svn, LAYOUT, full_lo,
        full_hi, N, WINDOW, qk_scale, D_QK, D_V, BLOCK_QK, BLOCK_V, HAS_WINDOW,
        False, COMPUTE, PREC, BLOCK_N,
    )  # fmt: skip
    acc, l_i, m_i = _block0(
        acc, l_i, m_i, q, rows, doc_q, k_base, v_base, skn, svn, LAYOUT, full_hi,
        hi, N, WINDOW, qk_scale, D_QK, D_V, BLOCK_QK, BLOCK_V, HAS_WINDOW,
        True, COMPUTE, PREC, BLOCK_N,
    )  # fmt: skip

    # diagonal blocks j = 1..t: key/value rows j*N + rows, one dot product per row
    q32 = q.to(tl.float32)
    for j in range(1, NUM_BLOCKS):
        k_j, v_j = load_diagonal(
            k_base, v_base, skn, svn, rows, row_valid, j, N, D_QK, D_V, BLOCK_QK,
            BLOCK_V, COMPUTE,
        )  # fmt: skip
        s_j = tl.sum(q32 * k_j, axis=1) * qk_scale
        s_j = tl.where(row_valid, s_j, float("-inf"))
        m_i, m_safe, alpha = online_softmax_update(m_i, s_j)
        p_j = tl.math.exp2(s_j - m_safe)
        l_i = l_i * alpha + p_j
        acc = acc * alpha[:, None] + p_j[:, None] * v_j

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    lse = tl.where(l_i == 0.0, 0.0, m_i + tl.math.log2(l_safe))
    o_base = head(Out, b, h, sob, soh)
    store_rows(o_base, rows, son, row_valid, D_V, acc / l_safe[:, None])
    tl.store(LSE + pid_bh.to(tl.int64) * N + rows, lse, mask=row_valid)


fwd_kernel = lazy_jit(_fwd_kernel)


def run_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: torch.Tensor,
    scale: float,
    sliding_window: int | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the forward kernel. Returns (O ``[B, Hq, N, d_v]`` in q's dtype,
    LSE2 fp32 ``[B, Hq, N]``)."""
    b, hq, n, d_qk = q.shape
    hkv, kv_len, d_v = k.shape[1], k.shape[2], v.shape[3]
    launch = LaunchShape(d_qk, d_v, hq // hkv, q.dtype, sliding_window, scale)
    block_m, block_n, num_warps, num_stages = launch.blocks("fwd")
    o = q.new_empty((b, hq, n, d_v))
    lse = torch.empty((b, hq, n), dtype=torch.float32, device=q.device)
    fwd_kernel()[(triton.cdiv(n, block_m), b * hq)](
        q, k, v, o, lse, layout,
        *row_strides(q, k, v, o),
        n, hq, kv_len // n, launch.window, launch.qk_scale,
        **launch.shape, **launch.block0,
        BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    return o, lse
