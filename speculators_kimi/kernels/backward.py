"""Triton backward kernels of the draft-head TTT attention.

Three launches, all deterministic (no atomics):

1. ``diag``: per (KV head, row tile). ``Delta = rowsum(dO * O)`` of the group's
   query heads (FlashAttention's preprocess), and every diagonal block ``j = 1..t``
   at once: key ``jN + i`` is only seen by row ``i`` of the group's heads, so
   ``dK_j[i] = scale * sum_g ds_j q`` and ``dV_j[i] = sum_g p_j dO``, and dQ's
   diagonal part ``scale * sum_j ds_j k_j`` goes into dQ. Memory-bound: each row
   of q, dO, O, K_j, V_j is loaded once.
2. ``dq``: per (query head, query tile), heaviest tiles first: dQ from the block-0
   tiles (as in the forward: masked edges, then the unmasked interior), added to
   the diagonal part.
3. ``dkv0``: per (KV head, key tile of block 0), the first (most seen) tiles first.
   Loops over the group's query heads and, per head, the query tiles that can see
   the key tile (``tiles.key_tile_queries``) in two stages: both masked edges
   through one index remap, then the interior.

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
    EDGES,
    INTERIOR,
    allowed,
    head,
    key_tile,
    key_tile_queries,
    layout_row,
    load_qk,
    load_rows,
    qk_dot,
    query_tile_keys,
    store_qk,
    store_rows,
    tile_count,
    tile_start,
)

__all__ = ["run_backward"]


@triton.jit
def _dq_block0(dq, q, do, lse, delta, rows, doc_q, kv, LAYOUT, bounds, N, WINDOW,
               qk_scale, D_QK, BLOCK_QK, BLOCK_QK2, SPLIT, D_V, BLOCK_V, HAS_WINDOW,
               COMPUTE, PREC, BLOCK_N: tl.constexpr,
               STAGE: tl.constexpr):  # fmt: skip
    """dQ (a pair, unscaled) of ``rows`` from the block-0 key tiles of ``STAGE``."""
    dq_a, dq_b = dq
    for i in range(0, tile_count(bounds, BLOCK_N, STAGE)):
        start_n = tile_start(i, bounds, BLOCK_N, STAGE)
        s, k, v = key_tile(q, rows, doc_q, kv, LAYOUT, start_n, N, WINDOW, qk_scale,
                           D_QK, BLOCK_QK, BLOCK_QK2, SPLIT, D_V, BLOCK_V, HAS_WINDOW,
                           STAGE == EDGES, COMPUTE, PREC, BLOCK_N)  # fmt: skip
        p = tl.math.exp2(s - lse[:, None])  # 0 where masked (s = -inf)
        dp = tl.dot(do, tl.trans(v), input_precision=PREC)
        ds = (p * (dp - delta[:, None])).to(COMPUTE)
        dq_a += tl.dot(ds, k[0], input_precision=PREC)
        if SPLIT:
            dq_b += tl.dot(ds, k[1], input_precision=PREC)
    return dq_a, dq_b


def _dq_kernel(
    Q, K, V, DO, LSE, DELTA, DQ, LAYOUT,  # tensors
    q_strides, k_strides, v_strides, do_strides, dq_strides,
    N, HQ, WINDOW, qk_scale, sm_scale,
    NUM_BLOCKS: tl.constexpr,  # block 0 + TTT steps (DQ holds the diagonal's part)
    D_QK: tl.constexpr, BLOCK_QK: tl.constexpr, BLOCK_QK2: tl.constexpr,
    SPLIT: tl.constexpr, D_V: tl.constexpr, BLOCK_V: tl.constexpr,
    GROUP: tl.constexpr, COMPUTE: tl.constexpr,  # head shape
    HAS_WINDOW: tl.constexpr, PREC: tl.constexpr,  # block 0
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,  # tile
):  # fmt: skip
    pid_bh = tl.program_id(0)
    pid_m = tl.num_programs(1) - 1 - tl.program_id(1)  # heaviest query tiles first
    b = pid_bh // HQ
    h = pid_bh % HQ
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_valid = rows < N
    kv = (head(K, b, h // GROUP, k_strides), head(V, b, h // GROUP, v_strides),
          k_strides[2], v_strides[2])  # fmt: skip
    q = load_qk(head(Q, b, h, q_strides), rows, q_strides[2], row_valid, D_QK,
                BLOCK_QK, BLOCK_QK2, SPLIT, COMPUTE)  # fmt: skip
    do = load_rows(head(DO, b, h, do_strides), rows, do_strides[2], row_valid, D_V,
                   BLOCK_V, COMPUTE)  # fmt: skip
    row_base = pid_bh.to(tl.int64) * N
    delta = tl.load(DELTA + row_base + rows, mask=row_valid, other=0.0)
    lse = tl.load(LSE + row_base + rows, mask=row_valid, other=0.0)
    doc_q = layout_row(LAYOUT, DOC, rows, row_valid, N, -1)
    bounds = query_tile_keys(LAYOUT, rows, row_valid, N, WINDOW, HAS_WINDOW, BLOCK_M,
                             BLOCK_N)  # fmt: skip

    dq = (tl.zeros([BLOCK_M, BLOCK_QK], dtype=tl.float32),
          tl.zeros([BLOCK_M, BLOCK_QK2], dtype=tl.float32))  # fmt: skip
    dq = _dq_block0(dq, q, do, lse, delta, rows, doc_q, kv, LAYOUT, bounds, N, WINDOW,
                    qk_scale, D_QK, BLOCK_QK, BLOCK_QK2, SPLIT, D_V, BLOCK_V,
                    HAS_WINDOW, COMPUTE, PREC, BLOCK_N, EDGES)  # fmt: skip
    dq = _dq_block0(dq, q, do, lse, delta, rows, doc_q, kv, LAYOUT, bounds, N, WINDOW,
                    qk_scale, D_QK, BLOCK_QK, BLOCK_QK2, SPLIT, D_V, BLOCK_V,
                    HAS_WINDOW, COMPUTE, PREC, BLOCK_N, INTERIOR)  # fmt: skip
    dq_a, dq_b = dq

    dq_base = head(DQ, b, h, dq_strides)
    dq_a = dq_a * sm_scale
    dq_b = dq_b * sm_scale
    if NUM_BLOCKS > 1:  # add the diagonal blocks' part, which the rows kernel wrote
        diag = load_qk(dq_base, rows, dq_strides[2], row_valid, D_QK, BLOCK_QK,
                       BLOCK_QK2, SPLIT, tl.float32)  # fmt: skip
        dq_a += diag[0]
        if SPLIT:
            dq_b += diag[1]
    store_qk(dq_base, rows, dq_strides[2], row_valid, D_QK, BLOCK_QK, SPLIT,
             (dq_a, dq_b))  # fmt: skip


@triton.jit
def _dkv_block0(dk, dv, k, v, cols, doc_k, group, LSE, DELTA, LAYOUT, bounds, N,
                WINDOW, qk_scale, D_QK, BLOCK_QK, BLOCK_QK2, SPLIT, D_V, BLOCK_V,
                GROUP, HAS_WINDOW, COMPUTE, PREC, BLOCK_M: tl.constexpr,
                STAGE: tl.constexpr):  # fmt: skip
    """dK (a pair, unscaled) and dV of the key tile ``cols`` from the query tiles
    of ``STAGE`` of the group's heads, as transposed tiles (rows: keys, columns:
    queries). One loop over (head, tile) pairs, head by head (a fixed order: no
    atomics); ``group = (Q, DO, q_strides, do_strides, b, first head, HQ)``. A
    loop over heads around the tile loop spilled 1.3 KB per thread at d=128 on
    triton 3.6."""
    Q, DO, q_strides, do_strides, b, h0, HQ = group
    dk_a, dk_b = dk
    count = tile_count(bounds, BLOCK_M, STAGE)
    for it in range(0, GROUP * count):
        g = it // count
        h = h0 + g
        q_base = head(Q, b, h, q_strides)
        do_base = head(DO, b, h, do_strides)
        sqn = q_strides[2]
        sdon = do_strides[2]
        row_base = (b * HQ + h).to(tl.int64) * N
        rows = tile_start(it - g * count, bounds, BLOCK_M, STAGE) + tl.arange(
            0, BLOCK_M
        )
        row_valid = rows < N
        q = load_qk(q_base, rows, sqn, row_valid, D_QK, BLOCK_QK, BLOCK_QK2, SPLIT,
                    COMPUTE)  # fmt: skip
        do = load_rows(do_base, rows, sdon, row_valid, D_V, BLOCK_V, COMPUTE)
        lse = tl.load(LSE + row_base + rows, mask=row_valid, other=0.0)
        delta = tl.load(DELTA + row_base + rows, mask=row_valid, other=0.0)
        p_t = tl.math.exp2(qk_dot(k, q, SPLIT, PREC) * qk_scale - lse[None, :])
        if STAGE == EDGES:
            doc_q = layout_row(LAYOUT, DOC, rows, row_valid, N, -1)
            ok = allowed(rows[None, :], cols[:, None], doc_q[None, :], doc_k[:, None],
                         WINDOW, HAS_WINDOW)  # fmt: skip
            p_t = tl.where(ok, p_t, 0.0)
        dv += tl.dot(p_t.to(COMPUTE), do, input_precision=PREC)
        dp_t = tl.dot(v, tl.trans(do), input_precision=PREC)
        ds_t = (p_t * (dp_t - delta[None, :])).to(COMPUTE)
        dk_a += tl.dot(ds_t, q[0], input_precision=PREC)
        if SPLIT:
            dk_b += tl.dot(ds_t, q[1], input_precision=PREC)
    return (dk_a, dk_b), dv


def _dkv0_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV, LAYOUT,  # tensors
    q_strides, k_strides, v_strides, do_strides, dk_strides, dv_strides,
    N, HQ, HKV, WINDOW, qk_scale, sm_scale,
    D_QK: tl.constexpr, BLOCK_QK: tl.constexpr, BLOCK_QK2: tl.constexpr,
    SPLIT: tl.constexpr, D_V: tl.constexpr, BLOCK_V: tl.constexpr,
    GROUP: tl.constexpr, COMPUTE: tl.constexpr,  # head shape
    HAS_WINDOW: tl.constexpr, PREC: tl.constexpr,  # block 0
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,  # tile: queries x keys
):  # fmt: skip
    pid_bh = tl.program_id(0)
    pid_n = tl.program_id(1)  # the first key tiles are seen by the most queries
    b = pid_bh // HKV
    hk = pid_bh % HKV
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_valid = cols < N
    k = load_qk(head(K, b, hk, k_strides), cols, k_strides[2], col_valid, D_QK,
                BLOCK_QK, BLOCK_QK2, SPLIT, COMPUTE)  # fmt: skip
    v = load_rows(head(V, b, hk, v_strides), cols, v_strides[2], col_valid, D_V,
                  BLOCK_V, COMPUTE)  # fmt: skip
    doc_k = layout_row(LAYOUT, DOC, cols, col_valid, N, -2)
    bounds = key_tile_queries(LAYOUT, cols, col_valid, N, WINDOW, HAS_WINDOW, BLOCK_M,
                              BLOCK_N)  # fmt: skip

    dk = (tl.zeros([BLOCK_N, BLOCK_QK], dtype=tl.float32),
          tl.zeros([BLOCK_N, BLOCK_QK2], dtype=tl.float32))  # fmt: skip
    dv = tl.zeros([BLOCK_N, BLOCK_V], dtype=tl.float32)
    group = (Q, DO, q_strides, do_strides, b, hk * GROUP, HQ)
    dk, dv = _dkv_block0(dk, dv, k, v, cols, doc_k, group, LSE, DELTA, LAYOUT, bounds,
                         N, WINDOW, qk_scale, D_QK, BLOCK_QK, BLOCK_QK2, SPLIT, D_V,
                         BLOCK_V, GROUP, HAS_WINDOW, COMPUTE, PREC, BLOCK_M,
                         EDGES)  # fmt: skip
    dk, dv = _dkv_block0(dk, dv, k, v, cols, doc_k, group, LSE, DELTA, LAYOUT, bounds,
                         N, WINDOW, qk_scale, D_QK, BLOCK_QK, BLOCK_QK2, SPLIT, D_V,
                         BLOCK_V, GROUP, HAS_WINDOW, COMPUTE, PREC, BLOCK_M,
                         INTERIOR)  # fmt: skip

    store_qk(head(DK, b, hk, dk_strides), cols, dk_strides[2], col_valid, D_QK,
             BLOCK_QK, SPLIT, (dk[0] * sm_scale, dk[1] * sm_scale))  # fmt: skip
    store_rows(head(DV, b, hk, dv_strides), cols, dv_strides[2], col_valid, D_V, dv)


@triton.jit
def _diagonal_rows(base, rows, stride, valid, D: tl.constexpr, BLOCK_D: tl.constexpr,
                   COMPUTE: tl.constexpr):  # fmt: skip
    """``[STEPS, BLOCK_M, BLOCK_D]`` rows ``rows`` (``[STEPS, BLOCK_M]``), fp32."""
    cols = tl.arange(0, BLOCK_D)
    mask = valid[:, :, None] & (cols[None, None, :] < D)
    ptrs = base + rows.to(tl.int64)[:, :, None] * stride + cols[None, None, :]
    return tl.load(ptrs, mask=mask, other=0.0).to(COMPUTE).to(tl.float32)


@triton.jit
def _store_diagonal_rows(base, rows, stride, valid, D: tl.constexpr, value):
    cols = tl.arange(0, value.shape[2])
    mask = valid[:, :, None] & (cols[None, None, :] < D)
    ptrs = base + rows.to(tl.int64)[:, :, None] * stride + cols[None, None, :]
    tl.store(ptrs, value.to(base.dtype.element_ty), mask=mask)


def _diag_kernel(
    Q, K, V, Out, DO, LSE, DELTA, DQ, DK, DV,  # tensors
    q_strides, k_strides, v_strides, o_strides, do_strides, dq_strides, dk_strides,
    dv_strides,
    N, HQ, HKV, qk_scale, sm_scale,
    NUM_BLOCKS: tl.constexpr, STEPS: tl.constexpr,  # t + 1, next_power_of_2(t)
    D_QK: tl.constexpr, BLOCK_QK: tl.constexpr, D_V: tl.constexpr,
    BLOCK_V: tl.constexpr, GROUP: tl.constexpr, COMPUTE: tl.constexpr,
    BLOCK_M: tl.constexpr,
):  # fmt: skip
    """Per (KV head, row tile): ``Delta`` of the group's query heads, and every
    diagonal block's terms at once (``[STEPS, BLOCK_M, d]`` tiles): dK, dV, and
    dQ's diagonal part (into DQ, which the dq kernel completes). q, dO, O, LSE
    load once per head, each diagonal key and value row once."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // HKV
    hk = pid_bh % HKV
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_valid = rows < N
    steps = tl.arange(0, STEPS)
    kv_rows = (steps[:, None] + 1) * N + rows[None, :]  # block j = step + 1
    valid = (steps[:, None] < NUM_BLOCKS - 1) & row_valid[None, :]
    if NUM_BLOCKS > 1:
        k = _diagonal_rows(head(K, b, hk, k_strides), kv_rows, k_strides[2], valid,
                           D_QK, BLOCK_QK, COMPUTE)  # fmt: skip
        v = _diagonal_rows(head(V, b, hk, v_strides), kv_rows, v_strides[2], valid,
                           D_V, BLOCK_V, COMPUTE)  # fmt: skip
        dk = tl.zeros([STEPS, BLOCK_M, BLOCK_QK], dtype=tl.float32)
        dv = tl.zeros([STEPS, BLOCK_M, BLOCK_V], dtype=tl.float32)
    for g in range(GROUP):
        h = hk * GROUP + g
        do = load_rows(head(DO, b, h, do_strides), rows, do_strides[2], row_valid, D_V,
                       BLOCK_V, COMPUTE).to(tl.float32)  # fmt: skip
        o = load_rows(head(Out, b, h, o_strides), rows, o_strides[2], row_valid, D_V,
                      BLOCK_V, tl.float32)  # fmt: skip
        delta = tl.sum(do * o, axis=1)
        row_base = (b * HQ + h).to(tl.int64) * N
        tl.store(DELTA + row_base + rows, delta, mask=row_valid)
        if NUM_BLOCKS > 1:
            q = load_rows(head(Q, b, h, q_strides), rows, q_strides[2], row_valid,
                          D_QK, BLOCK_QK, COMPUTE).to(tl.float32)  # fmt: skip
            lse = tl.load(LSE + row_base + rows, mask=row_valid, other=0.0)
            s = tl.sum(q[None, :, :] * k, axis=2) * qk_scale
            p = tl.where(valid, tl.math.exp2(s - lse[None, :]), 0.0)
            ds = p * (tl.sum(do[None, :, :] * v, axis=2) - delta[None, :])
            dk += ds[:, :, None] * q[None, :, :]
            dv += p[:, :, None] * do[None, :, :]
            dq = tl.sum(ds[:, :, None] * k, axis=0) * sm_scale
            store_rows(head(DQ, b, h, dq_strides), rows, dq_strides[2], row_valid,
                       D_QK, dq)  # fmt: skip
    if NUM_BLOCKS > 1:
        _store_diagonal_rows(head(DK, b, hk, dk_strides), kv_rows, dk_strides[2],
                             valid, D_QK, dk * sm_scale)  # fmt: skip
        _store_diagonal_rows(head(DV, b, hk, dv_strides), kv_rows, dv_strides[2],
                             valid, D_V, dv)  # fmt: skip


dq_kernel = lazy_jit(_dq_kernel)
dkv0_kernel = lazy_jit(_dkv0_kernel)
diag_kernel = lazy_jit(_diag_kernel)


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
    hkv, d_v = k.shape[1], v.shape[3]
    launch = LaunchShape(d_qk, d_v, hq // hkv, q.dtype, sliding_window, scale)
    dq = torch.empty_like(q)
    dk = torch.empty_like(k)
    dv = torch.empty_like(v)
    delta = torch.empty((b, hq, n), dtype=torch.float32, device=q.device)
    _launch_diag(launch, q, k, v, o, do, lse, delta, dq, dk, dv)
    _launch_dq(launch, q, k, v, do, lse, delta, dq, layout)
    _launch_dkv0(launch, q, k, v, do, lse, delta, dk, dv, layout)
    return dq, dk, dv


def _launch_dq(launch: LaunchShape, q, k, v, do, lse, delta, dq, layout) -> None:
    """dq, one program per (query head, query tile): block 0, added to the
    diagonal part already in ``dq``."""
    b, hq, n, _ = q.shape
    block_m, block_n, num_warps, num_stages = launch.blocks("dq")
    dq_kernel()[(b * hq, triton.cdiv(n, block_m))](
        q, k, v, do, lse, delta, dq, layout, *row_strides(q, k, v, do, dq),
        n, hq, launch.window, launch.qk_scale, launch.scale,
        NUM_BLOCKS=k.shape[2] // n, **launch.shape, **launch.block0,
        BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip


def _launch_dkv0(launch: LaunchShape, q, k, v, do, lse, delta, dk, dv, layout) -> None:
    """dk, dv of block 0: one program per (KV head, key tile), BLOCK_N keys x
    BLOCK_M queries per step."""
    b, hq, n, _ = q.shape
    hkv = k.shape[1]
    block_m, block_n, num_warps, num_stages = launch.blocks("dkv0")
    dkv0_kernel()[(b * hkv, triton.cdiv(n, block_n))](
        q, k, v, do, lse, delta, dk, dv, layout, *row_strides(q, k, v, do, dk, dv),
        n, hq, hkv, launch.window, launch.qk_scale, launch.scale,
        **launch.shape, **launch.block0,
        BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip


def _launch_diag(launch: LaunchShape, q, k, v, o, do, lse, delta, dq, dk, dv) -> None:
    """``delta`` (rowsum(o * do)), and the diagonal key blocks' dk, dv and dq
    part (TTT steps after the first), all steps of a row tile in one program."""
    b, hq, n, _ = q.shape
    hkv, blocks = k.shape[1], k.shape[2] // n
    steps = triton.next_power_of_2(max(1, blocks - 1))
    rows_x_steps, _, num_warps, _ = launch.blocks("diag")
    block_m = max(2, rows_x_steps // steps)
    # row tiles on axis 0: every program does the same work, and a long sequence
    # at 2-4 rows per tile runs past axis 1's 65535 programs
    diag_kernel()[(triton.cdiv(n, block_m), b * hkv)](
        q, k, v, o, do, lse, delta, dq, dk, dv,
        *row_strides(q, k, v, o, do, dq, dk, dv),
        n, hq, hkv, launch.qk_scale, launch.scale,
        NUM_BLOCKS=blocks, STEPS=steps, **launch.rowwise_shape,
        BLOCK_M=block_m, num_warps=num_warps,
    )  # fmt: skip
