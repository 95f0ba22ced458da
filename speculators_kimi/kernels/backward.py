"""Triton backward kernels of the draft-head TTT attention.

Three launches, all deterministic (no atomics):

1. ``dq``: per (query tile, query head). Computes ``Delta = rowsum(dO * O)`` for its
   rows (stored for the next launches), then dQ from the block-0 tiles (as in the
   forward) plus the diagonal terms ``ds_j k_j`` of blocks ``j = 1..t``.
2. ``dkv0``: per (key tile of block 0, KV head). Loops over the group's query heads
   and the query rows that can see the tile (to the document end, clipped by the
   window).
3. ``dkv_diag``: per (row tile, KV head), blocks ``j = 1..t``: key ``jN + i`` is only
   seen by row ``i`` of the group's heads, so ``dK_j[i] = scale * sum_g ds_j q`` and
   ``dV_j[i] = sum_g p_j dO``.

Probabilities are recomputed as ``p = 2^(s - LSE2)`` from the forward's base-2 LSE.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import forward as _fwd
from .forward import LOG2E, compute_dtype, dot_precision, lazy_jit

__all__ = ["run_backward"]


def _dq_kernel(
    Q,
    K,
    V,
    Out,
    DO,
    LSE,
    DELTA,
    DQ,
    DOC,
    STARTS,
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
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
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
    hk = h // GROUP

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    m_valid = offs_m < N
    d_valid = offs_d < D
    rows64 = offs_m.to(tl.int64)
    qd_mask = m_valid[:, None] & d_valid[None, :]

    b64 = b.to(tl.int64)
    h64 = h.to(tl.int64)
    hk64 = hk.to(tl.int64)
    q = tl.load(
        Q + b64 * sqb + h64 * sqh + rows64[:, None] * sqn + offs_d[None, :],
        mask=qd_mask,
        other=0.0,
    ).to(COMPUTE)
    do = tl.load(
        DO + b64 * sdob + h64 * sdoh + rows64[:, None] * sdon + offs_d[None, :],
        mask=qd_mask,
        other=0.0,
    ).to(COMPUTE)
    o = tl.load(
        Out + b64 * sob + h64 * soh + rows64[:, None] * son + offs_d[None, :],
        mask=qd_mask,
        other=0.0,
    ).to(tl.float32)
    delta = tl.sum(do.to(tl.float32) * o, axis=1)
    row_base = pid_bh.to(tl.int64) * N
    tl.store(DELTA + row_base + offs_m, delta, mask=m_valid)
    lse = tl.load(LSE + row_base + offs_m, mask=m_valid, other=0.0)

    k_base = K + b64 * skb + hk64 * skh
    v_base = V + b64 * svb + hk64 * svh

    doc_q = tl.load(DOC + offs_m, mask=m_valid, other=-1)
    start_q = tl.load(STARTS + offs_m, mask=m_valid, other=0)
    lo_rows = start_q
    if HAS_WINDOW:
        lo_rows = tl.maximum(lo_rows, offs_m - WINDOW + 1)
    lo_rows = tl.where(m_valid, lo_rows, N)
    lo = tl.min(lo_rows, axis=0)
    lo = (lo // BLOCK_N) * BLOCK_N
    hi = tl.minimum(pid_m * BLOCK_M + BLOCK_M, N)

    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        n_valid = offs_n < N
        cols64 = offs_n.to(tl.int64)
        kv_mask = n_valid[:, None] & d_valid[None, :]
        k = tl.load(
            k_base + cols64[:, None] * skn + offs_d[None, :], mask=kv_mask, other=0.0
        )
        v = tl.load(
            v_base + cols64[:, None] * svn + offs_d[None, :], mask=kv_mask, other=0.0
        )
        k = k.to(COMPUTE)
        v = v.to(COMPUTE)
        doc_k = tl.load(DOC + offs_n, mask=n_valid, other=-2)
        allowed = (offs_m[:, None] >= offs_n[None, :]) & (doc_q[:, None] != -1)
        allowed = allowed & (doc_q[:, None] == doc_k[None, :])
        if HAS_WINDOW:
            allowed = allowed & (offs_n[None, :] > offs_m[:, None] - WINDOW)
        allowed = allowed | (offs_m[:, None] == offs_n[None, :])
        allowed = allowed & m_valid[:, None] & n_valid[None, :]
        s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale
        p = tl.math.exp2(s - lse[:, None])
        p = tl.where(allowed, p, 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PREC)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(COMPUTE), k, input_precision=PREC)

    q32 = q.to(tl.float32)
    do32 = do.to(tl.float32)
    for j in range(1, NUM_BLOCKS):
        diag64 = rows64 + j * N
        kj = tl.load(
            k_base + diag64[:, None] * skn + offs_d[None, :], mask=qd_mask, other=0.0
        )
        vj = tl.load(
            v_base + diag64[:, None] * svn + offs_d[None, :], mask=qd_mask, other=0.0
        )
        kj = kj.to(COMPUTE).to(tl.float32)
        vj = vj.to(COMPUTE).to(tl.float32)
        s_j = tl.sum(q32 * kj, axis=1) * qk_scale
        p_j = tl.math.exp2(s_j - lse)
        p_j = tl.where(m_valid, p_j, 0.0)
        ds_j = p_j * (tl.sum(do32 * vj, axis=1) - delta)
        dq += ds_j[:, None] * kj

    dq = dq * sm_scale
    tl.store(
        DQ + b64 * sdqb + h64 * sdqh + rows64[:, None] * sdqn + offs_d[None, :],
        dq.to(DQ.dtype.element_ty),
        mask=qd_mask,
    )


def _dkv0_kernel(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DK,
    DV,
    DOC,
    ENDS,
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
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
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
    b64 = b.to(tl.int64)
    hk64 = hk.to(tl.int64)

    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    n_valid = offs_n < N
    d_valid = offs_d < D
    cols64 = offs_n.to(tl.int64)
    kv_mask = n_valid[:, None] & d_valid[None, :]

    k = tl.load(
        K + b64 * skb + hk64 * skh + cols64[:, None] * skn + offs_d[None, :],
        mask=kv_mask,
        other=0.0,
    ).to(COMPUTE)
    v = tl.load(
        V + b64 * svb + hk64 * svh + cols64[:, None] * svn + offs_d[None, :],
        mask=kv_mask,
        other=0.0,
    ).to(COMPUTE)
    doc_k = tl.load(DOC + offs_n, mask=n_valid, other=-2)
    end_k = tl.load(ENDS + offs_n, mask=n_valid, other=0)
    hi_cols = end_k
    if HAS_WINDOW:
        hi_cols = tl.minimum(hi_cols, offs_n + WINDOW)
    hi_cols = tl.maximum(hi_cols, offs_n + 1)  # the diagonal (padding keys)
    hi_cols = tl.where(n_valid, hi_cols, 0)
    hi = tl.minimum(tl.max(hi_cols, axis=0), N)
    lo = ((pid_n * BLOCK_N) // BLOCK_M) * BLOCK_M

    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    for g in range(GROUP):
        h = hk * GROUP + g
        h64 = h.to(tl.int64)
        row_base = (b * HQ + h).to(tl.int64) * N
        q_base = Q + b64 * sqb + h64 * sqh
        do_base = DO + b64 * sdob + h64 * sdoh
        for start_m in range(lo, hi, BLOCK_M):
            offs_m = start_m + tl.arange(0, BLOCK_M)
            m_valid = offs_m < N
            rows64 = offs_m.to(tl.int64)
            qd_mask = m_valid[:, None] & d_valid[None, :]
            q = tl.load(
                q_base + rows64[:, None] * sqn + offs_d[None, :],
                mask=qd_mask,
                other=0.0,
            ).to(COMPUTE)
            do = tl.load(
                do_base + rows64[:, None] * sdon + offs_d[None, :],
                mask=qd_mask,
                other=0.0,
            ).to(COMPUTE)
            lse = tl.load(LSE + row_base + offs_m, mask=m_valid, other=0.0)
            delta = tl.load(DELTA + row_base + offs_m, mask=m_valid, other=0.0)
            doc_q = tl.load(DOC + offs_m, mask=m_valid, other=-1)
            # transposed tile: rows = keys (offs_n), cols = queries (offs_m)
            allowed = (offs_m[None, :] >= offs_n[:, None]) & (doc_q[None, :] != -1)
            allowed = allowed & (doc_q[None, :] == doc_k[:, None])
            if HAS_WINDOW:
                allowed = allowed & (offs_n[:, None] > offs_m[None, :] - WINDOW)
            allowed = allowed | (offs_m[None, :] == offs_n[:, None])
            allowed = allowed & m_valid[None, :] & n_valid[:, None]
            s_t = tl.dot(k, tl.trans(q), input_precision=PREC) * qk_scale
            p_t = tl.math.exp2(s_t - lse[None, :])
            p_t = tl.where(allowed, p_t, 0.0)
            dv += tl.dot(p_t.to(COMPUTE), do, input_precision=PREC)
            dp_t = tl.dot(v, tl.trans(do), input_precision=PREC)
            ds_t = p_t * (dp_t - delta[None, :])
            dk += tl.dot(ds_t.to(COMPUTE), q, input_precision=PREC)

    dk = dk * sm_scale
    tl.store(
        DK + b64 * sdkb + hk64 * sdkh + cols64[:, None] * sdkn + offs_d[None, :],
        dk.to(DK.dtype.element_ty),
        mask=kv_mask,
    )
    tl.store(
        DV + b64 * sdvb + hk64 * sdvh + cols64[:, None] * sdvn + offs_d[None, :],
        dv.to(DV.dtype.element_ty),
        mask=kv_mask,
    )


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
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    GROUP: tl.constexpr,
    COMPUTE: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // HKV
    hk = pid_bh % HKV
    b64 = b.to(tl.int64)
    hk64 = hk.to(tl.int64)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    m_valid = offs_m < N
    d_valid = offs_d < D
    rows64 = offs_m.to(tl.int64)
    qd_mask = m_valid[:, None] & d_valid[None, :]

    for j in range(1, NUM_BLOCKS):
        diag64 = rows64 + j * N
        kj = tl.load(
            K + b64 * skb + hk64 * skh + diag64[:, None] * skn + offs_d[None, :],
            mask=qd_mask,
            other=0.0,
        )
        vj = tl.load(
            V + b64 * svb + hk64 * svh + diag64[:, None] * svn + offs_d[None, :],
            mask=qd_mask,
            other=0.0,
        )
        kj = kj.to(COMPUTE).to(tl.float32)
        vj = vj.to(COMPUTE).to(tl.float32)
        dk = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
        dv = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
        for g in range(GROUP):
            h = hk * GROUP + g
            h64 = h.to(tl.int64)
            row_base = (b * HQ + h).to(tl.int64) * N
            q = tl.load(
                Q + b64 * sqb + h64 * sqh + rows64[:, None] * sqn + offs_d[None, :],
                mask=qd_mask,
                other=0.0,
            )
            do = tl.load(
                DO + b64 * sdob + h64 * sdoh + rows64[:, None] * sdon + offs_d[None, :],
                mask=qd_mask,
                other=0.0,
            )
            q = q.to(COMPUTE).to(tl.float32)
            do = do.to(COMPUTE).to(tl.float32)
            lse = tl.load(LSE + row_base + offs_m, mask=m_valid, other=0.0)
            delta = tl.load(DELTA + row_base + offs_m, mask=m_valid, other=0.0)
            s_j = tl.sum(q * kj, axis=1) * qk_scale
            p_j = tl.math.exp2(s_j - lse)
            p_j = tl.where(m_valid, p_j, 0.0)
            ds_j = p_j * (tl.sum(do * vj, axis=1) - delta)
            dk += ds_j[:, None] * q
            dv += p_j[:, None] * do
        dk = dk * sm_scale
        tl.store(
            DK + b64 * sdkb + hk64 * sdkh + diag64[:, None] * sdkn + offs_d[None, :],
            dk.to(DK.dtype.element_ty),
            mask=qd_mask,
        )
        tl.store(
            DV + b64 * sdvb + hk64 * sdvh + diag64[:, None] * sdvn + offs_d[None, :],
            dv.to(DV.dtype.element_ty),
            mask=qd_mask,
        )


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
    doc: torch.Tensor,
    starts: torch.Tensor,
    ends: torch.Tensor,
    scale: float,
    sliding_window: int | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients (dq, dk, dv) in the inputs' dtypes. All tensors contiguous-last-dim."""
    b, hq, n, d = q.shape
    hkv, kv_len = k.shape[1], k.shape[2]
    num_blocks = kv_len // n
    group = hq // hkv
    block_d = max(16, triton.next_power_of_2(d))
    has_window = sliding_window is not None
    window = sliding_window if sliding_window is not None else 0
    qk_scale = scale * LOG2E
    comp = compute_dtype(q.dtype)
    prec = dot_precision(q.dtype)

    dq = torch.empty_like(q)
    dk = torch.empty_like(k)
    dv = torch.empty_like(v)
    delta = torch.empty((b, hq, n), dtype=torch.float32, device=q.device)

    block_m, block_n, num_warps, num_stages = _fwd.pick_blocks(block_d, q.dtype, "dq")
    dq_kernel()[(triton.cdiv(n, block_m), b * hq)](
        q,
        k,
        v,
        o,
        do,
        lse,
        delta,
        dq,
        doc,
        starts,
        *q.stride()[:3],
        *k.stride()[:3],
        *v.stride()[:3],
        *o.stride()[:3],
        *do.stride()[:3],
        *dq.stride()[:3],
        n,
        hq,
        num_blocks,
        window,
        qk_scale,
        scale,
        D=d,
        BLOCK_D=block_d,
        GROUP=group,
        HAS_WINDOW=has_window,
        COMPUTE=comp,
        PREC=prec,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    # block 0: key tiles are the "M" side here; use BLOCK_N keys x BLOCK_M queries
    block_m, block_n, num_warps, num_stages = _fwd.pick_blocks(block_d, q.dtype, "dkv0")
    dkv0_kernel()[(triton.cdiv(n, block_n), b * hkv)](
        q,
        k,
        v,
        do,
        lse,
        delta,
        dk,
        dv,
        doc,
        ends,
        *q.stride()[:3],
        *k.stride()[:3],
        *v.stride()[:3],
        *do.stride()[:3],
        *dk.stride()[:3],
        *dv.stride()[:3],
        n,
        hq,
        hkv,
        window,
        qk_scale,
        scale,
        D=d,
        BLOCK_D=block_d,
        GROUP=group,
        HAS_WINDOW=has_window,
        COMPUTE=comp,
        PREC=prec,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    if num_blocks > 1:
        block_m, _, num_warps, _ = _fwd.pick_blocks(block_d, q.dtype, "diag")
        dkv_diag_kernel()[(triton.cdiv(n, block_m), b * hkv)](
            q,
            k,
            v,
            do,
            lse,
            delta,
            dk,
            dv,
            *q.stride()[:3],
            *k.stride()[:3],
            *v.stride()[:3],
            *do.stride()[:3],
            *dk.stride()[:3],
            *dv.stride()[:3],
            n,
            hq,
            hkv,
            num_blocks,
            qk_scale,
            scale,
            D=d,
            BLOCK_D=block_d,
            GROUP=group,
            COMPUTE=comp,
            BLOCK_M=block_m,
            num_warps=num_warps,
        )
    return dq, dk, dv
