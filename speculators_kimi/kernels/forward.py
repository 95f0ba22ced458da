"""Triton forward kernel of the draft-head TTT attention.

Per (query head, query tile), heaviest tiles first: block 0 runs as FlashAttention
tiles over the keys a row of the tile can see, in two stages of one inner loop (the
masked edges, then the interior without the per-element mask:
``tiles.query_tile_keys``); then each diagonal block ``j = 1..t`` (unrolled: the
step count is a compile-time constant) contributes one dot product per row, merged
into the same online softmax. Stores O and the base-2
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
    EDGES,
    INTERIOR,
    head,
    key_tile,
    layout_row,
    load_diagonal,
    load_qk,
    online_softmax_update,
    query_tile_keys,
    rowwise_qk,
    store_rows,
    tile_count,
    tile_start,
)

__all__ = ["run_forward"]


@triton.jit
def _block0(acc, l_i, m_i, q, rows, doc_q, kv, LAYOUT, bounds, N, WINDOW, qk_scale,
            D_QK, BLOCK_QK, BLOCK_QK2, SPLIT, D_V, BLOCK_V, HAS_WINDOW, COMPUTE, PREC,
            BLOCK_N: tl.constexpr, STAGE: tl.constexpr):  # fmt: skip
    """The block-0 key tiles of ``STAGE`` (``EDGES``: masked; ``INTERIOR``: not)
    into the online softmax of ``rows``."""
    for i in range(0, tile_count(bounds, BLOCK_N, STAGE)):
        start_n = tile_start(i, bounds, BLOCK_N, STAGE)
        s, _, v = key_tile(q, rows, doc_q, kv, LAYOUT, start_n, N, WINDOW, qk_scale,
                           D_QK, BLOCK_QK, BLOCK_QK2, SPLIT, D_V, BLOCK_V, HAS_WINDOW,
                           STAGE == EDGES, COMPUTE, PREC, BLOCK_N)  # fmt: skip
        m_i, m_safe, alpha = online_softmax_update(m_i, tl.max(s, axis=1))
        p = tl.math.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(COMPUTE), v, input_precision=PREC)
    return acc, l_i, m_i


def _fwd_kernel(
    Q, K, V, Out, LSE, LAYOUT,  # tensors
    q_strides, k_strides, v_strides, o_strides,  # (batch, head, row) each
    N, HQ, WINDOW, qk_scale,
    NUM_BLOCKS: tl.constexpr,  # block 0 + TTT steps: the diagonal is unrolled
    D_QK: tl.constexpr, BLOCK_QK: tl.constexpr, BLOCK_QK2: tl.constexpr,
    SPLIT: tl.constexpr, D_V: tl.constexpr, BLOCK_V: tl.constexpr,
    GROUP: tl.constexpr, COMPUTE: tl.constexpr,  # head shape
    HAS_WINDOW: tl.constexpr, PREC: tl.constexpr,  # block 0
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,  # tile
):  # fmt: skip
    pid_bh = tl.program_id(0)
    # the last query tiles see the most keys: launched first, not in the last wave
    pid_m = tl.num_programs(1) - 1 - tl.program_id(1)
    b = pid_bh // HQ
    h = pid_bh % HQ
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_valid = rows < N
    kv = (head(K, b, h // GROUP, k_strides), head(V, b, h // GROUP, v_strides),
          k_strides[2], v_strides[2])  # fmt: skip
    q = load_qk(head(Q, b, h, q_strides), rows, q_strides[2], row_valid, D_QK,
                BLOCK_QK, BLOCK_QK2, SPLIT, COMPUTE)  # fmt: skip
    doc_q = layout_row(LAYOUT, DOC, rows, row_valid, N, -1)
    bounds = query_tile_keys(LAYOUT, rows, row_valid, N, WINDOW, HAS_WINDOW, BLOCK_M,
                             BLOCK_N)  # fmt: skip
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_V], dtype=tl.float32)
    # block 0: the masked edges (document start or window edge; the diagonal),
    # then the interior without the per-element mask
    acc, l_i, m_i = _block0(acc, l_i, m_i, q, rows, doc_q, kv, LAYOUT, bounds, N,
                            WINDOW, qk_scale, D_QK, BLOCK_QK, BLOCK_QK2, SPLIT, D_V,
                            BLOCK_V, HAS_WINDOW, COMPUTE, PREC, BLOCK_N,
                            EDGES)  # fmt: skip
    acc, l_i, m_i = _block0(acc, l_i, m_i, q, rows, doc_q, kv, LAYOUT, bounds, N,
                            WINDOW, qk_scale, D_QK, BLOCK_QK, BLOCK_QK2, SPLIT, D_V,
                            BLOCK_V, HAS_WINDOW, COMPUTE, PREC, BLOCK_N,
                            INTERIOR)  # fmt: skip

    # diagonal blocks j = 1..t: key/value rows j*N + rows, one dot product per
    # row; unrolled (a compile-time step count), so every block's loads can issue
    # before the math that waits on them
    for j in tl.static_range(1, NUM_BLOCKS):
        k_j, v_j = load_diagonal(kv, rows, row_valid, j, N, D_QK, BLOCK_QK, BLOCK_QK2,
                                 SPLIT, D_V, BLOCK_V, COMPUTE)  # fmt: skip
        s_j = rowwise_qk(q, k_j, SPLIT) * qk_scale
        s_j = tl.where(row_valid, s_j, float("-inf"))
        m_i, m_safe, alpha = online_softmax_update(m_i, s_j)
        p_j = tl.math.exp2(s_j - m_safe)
        l_i = l_i * alpha + p_j
        acc = acc * alpha[:, None] + p_j[:, None] * v_j.to(tl.float32)

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    lse = tl.where(l_i == 0.0, 0.0, m_i + tl.math.log2(l_safe))
    store_rows(head(Out, b, h, o_strides), rows, o_strides[2], row_valid, D_V,
               acc / l_safe[:, None])  # fmt: skip
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
    fwd_kernel()[(b * hq, triton.cdiv(n, block_m))](
        q, k, v, o, lse, layout, *row_strides(q, k, v, o),
        n, hq, launch.window, launch.qk_scale, NUM_BLOCKS=kv_len // n,
        **launch.shape, **launch.block0,
        BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    return o, lse
