"""Triton backward kernels of the draft-head TTT attention.

Three launches, all deterministic (no atomics):

1. ``dq``: per (query tile, query head). Computes ``Delta = rowsum(dO * O)`` for its
   rows (stored for the next launches), then dQ from the block-0 tiles (as in the
   forward: the per-element mask on edge tiles only) plus the diagonal terms
   ``ds_j k_j`` of blocks ``j = 1..t``.
2. ``dkv0``: per (key tile of block 0, KV head). Loops over the group's query heads
   and the query tiles that can see the key tile (``tiles.key_tile_queries``), the
   mask on edge tiles only.
3. ``dkv_diag``: per (row tile, KV head), blocks ``j = 1..t``: key ``jN + i`` is only
   seen by row ``i`` of the group's heads, so ``dK_j[i] = scale * sum_g ds_j q`` and
   ``dV_j[i] = sum_g p_j dO``.

Probabilities are recomputed as ``p = 2^(s - LSE2)`` from the forward's base-2 LSE.
q/k tensors have head dim ``D_QK``, v/o tensors ``D_V``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .configs import LaunchShape
from .jit import lazy_jit, row_strides
from .tiles import (
    DOC,
    allowed,
    head,
    key_tile,
    key_tile_queries,
    layout_row,
    load_diagonal,
    load_rows,
    query_tile_keys,
    store_rows,
)

__all__ = ["run_backward"]


@triton.jit
def _diagonal_ds(q32, do32, k_j, v_j, lse, delta, qk_scale, row_valid):
    """``p_j`` and ``ds_j / scale`` of diagonal block ``j`` for each row (fp32)."""
    s_j = tl.sum(q32 * k_j, axis=1) * qk_scale
    p_j = tl.where(row_valid, tl.math.exp2(s_j - lse), 0.0)
    return p_j, p_j * (tl.sum(do32 * v_j, axis=1) - delta)


@triton.jit
def _dq_block0(
    dq,
    q,
    do,
    lse,
    delta,
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
    """dQ of ``rows`` from the block-0 key tiles ``[lo, hi)`` (unscaled)."""
    for start_n in range(lo, hi, BLOCK_N):
        s, k, v = key_tile(
            q, rows, doc_q, k_base, v_base, skn, svn, LAYOUT, start_n, N, WINDOW,
            qk_scale, D_QK, D_V, BLOCK_QK, BLOCK_V, HAS_WINDOW, MASKED, COMPUTE,
            PREC, BLOCK_N,
        )  # fmt: skip
        p = tl.math.exp2(s - lse[:, None])  # 0 where masked (s = -inf)
        dp = tl.dot(do, tl.trans(v), input_precision=PREC)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(COMPUTE), k, input_precision=PREC)
    return dq


def _dq_kernel(
    Q,
    K,
    V,
    Out,
    DO,
    LSE,
    DELTA,
    DQ,
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
    sdob,
    sdoh,
    sdon,
    sdqb,
    sdqh,
    sdqn,
    N,
    HQ,
    NUM_BLOCKS,
    WINDOW,
    qk_scale,
    sm_scale,
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
    k_base = head(K, b, h // GROUP, skb, skh)
    v_base = head(V, b, h // GROUP, svb, svh)

    q = load_rows(
        head(Q, b, h, sqb, sqh), rows, sqn, row_valid, D_QK, BLOCK_QK, COMPUTE
    )
    do = load_rows(
        head(DO, b, h, sdob, sdoh), rows, sdon, row_valid, D_V, BLOCK_V, COMPUTE
    )
    o = load_rows(
        head(Out, b, h, sob, soh), rows, son, row_valid, D_V, BLOCK_V, tl.float32
    )
    delta = tl.sum(do.to(tl.float32) * o, axis=1)
    row_base = pid_bh.to(tl.int64) * N
    tl.store(DELTA + row_base + rows, delta, mask=row_valid)
    lse = tl.load(LSE + row_base + rows, mask=row_valid, other=0.0)
    doc_q = layout_row(LAYOUT, DOC, rows, row_valid, N, -1)
    lo, full_lo, full_hi, hi = query_tile_keys(
        LAYOUT, rows, row_valid, N, WINDOW, HAS_WINDOW, BLOCK_M, BLOCK_N
    )

    dq = tl.zeros([BLOCK_M, BLOCK_QK], dtype=tl.float32)
    dq = _dq_block0(
        dq, q, do, lse, delta, rows, doc_q, k_base, v_base, skn, svn, LAYOUT, lo,
        full_lo, N, WINDOW, qk_scale, D_QK, D_V, BLOCK_QK, BLOCK_V, HAS_WINDOW,
        True, COMPUTE, PREC, BLOCK_N,
    )  # fmt: skip
    dq = _dq_block0(
        dq, q, do, lse, delta, rows, doc_q, k_base, v_base, skn, svn, LAYOUT,
        full_lo, full_hi, N, WINDOW, qk_scale, D_QK, D_V, BLOCK_QK, BLOCK_V,
        HAS_WINDOW, False, COMPUTE, PREC, BLOCK_N,
    )  # fmt: skip
    dq = _dq_block0(
        dq, q, do, lse, delta, rows, doc_q, k_base, v_base, skn, svn, LAYOUT,
        full_hi, hi, N, WINDOW, qk_scale, D_QK, D_V, BLOCK_QK, BLOCK_V, HAS_WINDOW,
        True, COMPUTE, PREC, BLOCK_N,
    )  # fmt: skip

    q32 = q.to(tl.float32)
    do32 = do.to(tl.float32)
    for j in range(1, NUM_BLOCKS):
        k_j, v_j = load_diagonal(
            k_base, v_base, skn, svn, rows, row_valid, j, N, D_QK, D_V, BLOCK_QK,
            BLOCK_V, COMPUTE,
        )  # fmt: skip
        _, ds_j = _diagonal_ds(q32, do32, k_j, v_j, lse, delta, qk_scale, row_valid)
        dq += ds_j[:, None] * k_j

    store_rows(head(DQ, b, h, sdqb, sdqh), rows, sdqn, row_valid, D_QK, dq * sm_scale)


@triton.jit
def _dkv_block0(
    dk,
    dv,
    k,
    v,
    cols,
    doc_k,
    q_base,
    do_base,
    LSE,
    DELTA,
    row_base,
    sqn,
    sdon,
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
    BLOCK_M: tl.constexpr,
):
    """dK, dV of the key tile ``cols`` from one head's query tiles ``[lo, hi)``,
    computed as transposed tiles (rows: keys, columns: queries; dK unscaled)."""
    for start_m in range(lo, hi, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)
        row_valid = rows < N
        q = load_rows(q_base, rows, sqn, row_valid, D_QK, BLOCK_QK, COMPUTE)
        do = load_rows(do_base, rows, sdon, row_valid, D_V, BLOCK_V, COMPUTE)
        lse = tl.load(LSE + row_base + rows, mask=row_valid, other=0.0)
        delta = tl.load(DELTA + row_base + rows, mask=row_valid, other=0.0)
        s_t = tl.dot(k, tl.trans(q), input_precision=PREC) * qk_scale
        p_t = tl.math.exp2(s_t - lse[None, :])
        if MASKED:
            doc_q = layout_row(LAYOUT, DOC, rows, row_valid, N, -1)
            ok = allowed(
                rows[None, :], cols[:, None], doc_q[None, :], doc_k[:, None],
                WINDOW, HAS_WINDOW,
            )  # fmt: skip
            p_t = tl.where(ok, p_t, 0.0)
        dv += tl.dot(p_t.to(COMPUTE), do, input_precision=PREC)
        dp_t = tl.dot(v, tl.trans(do), input_precision=PREC)
        ds_t = p_t * (dp_t - delta[None, :])
        dk += tl.dot(ds_t.to(COMPUTE), q, input_precision=PREC)
    return dk, dv


def _dkv0_kernel(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DK,
    DV,
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
    sdob,
    sdoh,
    sdon,
    sdkb,
    sdkh,
    sdkn,
    sdvb,
    sdvh,
    sdvn,
    N,
    HQ,
    HKV,
    WINDOW,
    qk_scale,
    sm_scale,
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
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // HKV
    hk = pid_bh % HKV
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_valid = cols < N

    k = load_rows(
        head(K, b, hk, skb, skh), cols, skn, col_valid, D_QK, BLOCK_QK, COMPUTE
    )
    v = load_rows(head(V, b, hk, svb, svh), cols, svn, col_valid, D_V, BLOCK_V, COMPUTE)
    doc_k = layout_row(LAYOUT, DOC, cols, col_valid, N, -2)
    lo, full_lo, full_hi, hi = key_tile_queries(
        LAYOUT, cols, col_valid, N, WINDOW, HAS_WINDOW, BLOCK_M, BLOCK_N
    )

    dk = tl.zeros([BLOCK_N, BLOCK_QK], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_V], dtype=tl.float32)
    for g in range(GROUP):
        h = hk * GROUP + g
        q_base = head(Q, b, h, sqb, sqh)
        do_base = head(DO, b, h, sdob, sdoh)
        row_base = (b * HQ + h).to(tl.int64) * N
        dk, dv = _dkv_block0(
            dk, dv, k, v, cols, doc_k, q_base, do_base, LSE, DELTA, row_base, sqn,
            sdon, LAYOUT, lo, full_lo, N, WINDOW, qk_scale, D_QK, D_V, BLOCK_QK,
            BLOCK_V, HAS_WINDOW, True, COMPUTE, PREC, BLOCK_M,
        )  # fmt: skip
        dk, dv = _dkv_block0(
            dk, dv, k, v, cols, doc_k, q_base, do_base, LSE, DELTA, row_base, sqn,
            sdon, LAYOUT, full_lo, full_hi, N, WINDOW, qk_scale, D_QK, D_V,
            BLOCK_QK, BLOCK_V, HAS_WINDOW, False, COMPUTE, PREC, BLOCK_M,
        )  # fmt: skip
        dk, dv = _dkv_block0(
            dk, dv, k, v, cols, doc_k, q_base, do_base, LSE, DELTA, row_base, sqn,
            sdon, LAYOUT, full_hi, hi, N, WINDOW, qk_scale, D_QK, D_V, BLOCK_QK,
            BLOCK_V, HAS_WINDOW, True, COMPUTE, PREC, BLOCK_M,
        )  # fmt: skip

    store_rows(head(DK, b, hk, sdkb, sdkh), cols, sdkn, col_valid, D_QK, dk * sm_scale)
    store_rows(head(DV, b, hk, sdvb, sdvh), cols, sdvn, col_valid, D_V, dv)


def _dkv_diag_kernel(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DK,
    DV,
    sqb,
    sqh,
    sqn,
    skb,
    skh,
    skn,
    svb,
    svh,
    svn,
    sdob,
    sdoh,
    sdon,
    sdkb,
    sdkh,
    sdkn,
    sdvb,
    sdvh,
    sdvn,
    N,
    HQ,
    HKV,
    NUM_BLOCKS,
    qk_scale,
    sm_scale,
    D_QK: tl.constexpr,
    D_V: tl.constexpr,
    BLOCK_QK: tl.constexpr,
    BLOCK_V: tl.constexpr,
    GROUP: tl.constexpr,
    COMPUTE: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // HKV
    hk = pid_bh % HKV
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_valid = rows < N
    k_base = head(K, b, hk, skb, skh)
    v_base = head(V, b, hk, svb, svh)
    dk_base = head(DK, b, hk, sdkb, sdkh)
    dv_base = head(DV, b, hk, sdvb, sdvh)

    for j in range(1, NUM_BLOCKS):
        k_j, v_j = load_diagonal(
            k_base, v_base, skn, svn, rows, row_valid, j, N, D_QK, D_V, BLOCK_QK,
            BLOCK_V, COMPUTE,
        )  # fmt: skip
        dk = tl.zeros([BLOCK_M, BLOCK_QK], dtype=tl.float32)
        dv = tl.zeros([BLOCK_M, BLOCK_V], dtype=tl.float32)
        for g in range(GROUP):
            h = hk * GROUP + g
            q = load_rows(
                head(Q, b, h, sqb, sqh), rows, sqn, row_valid, D_QK, BLOCK_QK, COMPUTE
            )
            do = load_rows(
                head(DO, b, h, sdob, sdoh), rows, sdon, row_valid, D_V, BLOCK_V, COMPUTE
            )
            q = q.to(tl.float32)
            do = do.to(tl.float32)
            row_base = (b * HQ + h).to(tl.int64) * N
            lse = tl.load(LSE + row_base + rows, mask=row_valid, other=0.0)
            delta = tl.load(DELTA + row_base + rows, mask=row_valid, other=0.0)
            p_j, ds_j = _diagonal_ds(q, do, k_j, v_j, lse, delta, qk_scale, row_valid)
            dk += ds_j[:, None] * q
            dv += p_j[:, None] * do
        store_rows(dk_base, rows + j * N, sdkn, row_valid, D_QK, dk * sm_scale)
        store_rows(dv_base, rows + j * N, sdvn, row_valid, D_V, dv)


dq_kernel = lazy_jit(_dq_kernel)
dkv0_kernel = lazy_jit(_dkv0_kernel)
dkv_diag_kernel = lazy_jit(_dkv_diag_kernel)


def run_backward(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    layout: torch.Tensor,
    scale: float,
    sliding_window: int | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients (dq, dk, dv) in the inputs' dtypes. All tensors unit-stride in
    their last dim."""
    b, hq, n, d_qk = q.shape
    hkv, kv_len, d_v = k.shape[1], k.shape[2], v.shape[3]
    launch = LaunchShape(d_qk, d_v, hq // hkv, q.dtype, sliding_window, scale)
    dq = torch.empty_like(q)
    dk = torch.empty_like(k)
    dv = torch.empty_like(v)
    delta = torch.empty((b, hq, n), dtype=torch.float32, device=q.device)
    _launch_dq(launch, q, k, v, o, do, lse, delta, dq, layout)
    _launch_dkv0(launch, q, k, v, do, lse, delta, dk, dv, layout)
    if kv_len > n:
        _launch_dkv_diag(launch, q, k, v, do, lse, delta, dk, dv)
    return dq, dk, dv


def _launch_dq(launch: LaunchShape, q, k, v, o, do, lse, delta, dq, layout) -> None:
    """dq, one program per query tile; also writes ``delta`` (rowsum(o * do))."""
    b, hq, n, _ = q.shape
    block_m, block_n, num_warps, num_stages = launch.blocks("dq")
    dq_kernel()[(triton.cdiv(n, block_m), b * hq)](
        q, k, v, o, do, lse, delta, dq, layout,
        *row_strides(q, k, v, o, do, dq),
        n, hq, k.shape[2] // n, launch.window, launch.qk_scale, launch.scale,
        **launch.shape, **launch.block0,
        BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip


def _launch_dkv0(launch: LaunchShape, q, k, v, do, lse, delta, dk, dv, layout) -> None:
    """dk, dv of block 0: one program per key tile, BLOCK_N keys x BLOCK_M
    queries per step."""
    b, hq, n, _ = q.shape
    hkv = k.shape[1]
    block_m, block_n, num_warps, num_stages = launch.blocks("dkv0")
    dkv0_kernel()[(triton.cdiv(n, block_n), b * hkv)](
        q, k, v, do, lse, delta, dk, dv, layout,
        *row_strides(q, k, v, do, dk, dv),
        n, hq, hkv, launch.window, launch.qk_scale, launch.scale,
        **launch.shape, **launch.block0,
        BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip


def _launch_dkv_diag(launch: LaunchShape, q, k, v, do, lse, delta, dk, dv) -> None:
    """dk, dv of the diagonal key blocks (TTT steps after the first)."""
    b, hq, n, _ = q.shape
    hkv = k.shape[1]
    block_m, _, num_warps, _ = launch.blocks("diag")
    dkv_diag_kernel()[(triton.cdiv(n, block_m), b * hkv)](
        q, k, v, do, lse, delta, dk, dv,
        *row_strides(q, k, v, do, dk, dv),
        n, hq, hkv, k.shape[2] // n, launch.qk_scale, launch.scale,
        **launch.shape,
        BLOCK_M=block_m, num_warps=num_warps,
    )  # fmt: skip
