"""``triton.jit`` helpers every draft-attention kernel is built from.

- ``allowed``: the block-0 mask of (query, key) pairs. The broadcast shapes of its
  arguments pick the orientation: ``[M, 1] x [1, N]`` for a query tile against a
  key tile (forward, dQ), ``[1, M] x [N, 1]`` for the transposed tile (dK/dV).
- ``query_tile_keys`` / ``key_tile_queries``: the block-0 range a tile loops over,
  split into masked edges and an interior of full tiles. Interior tiles (every
  pair allowed: below the diagonal, inside one run of a document for every row,
  inside the window) run without the per-element mask; only tiles touching the
  diagonal, a document start or end, padding or the window edge pay for it.
- ``tile_count`` / ``tile_start``: the one block-0 inner loop per kernel runs in two
  stages (``EDGES``: both masked edges, left and diagonal, through one index remap;
  ``INTERIOR``: the unmasked tiles between them), as Triton's fused-attention
  tutorial runs its stages.
- ``load_rows`` / ``store_rows``: masked row loads and stores with int64 offsets;
  ``load_qk`` / ``store_qk``: a q/k head as one tile, or as two (``SPLIT``: 192 =
  128 + 64 for MLA) so that both dots keep Hopper's wgmma instead of padding to 256;
  ``load_diagonal``: the one key and value row each query sees in block ``j >= 1``.
- ``online_softmax_update``: one merge step of the running max (base 2), safe for
  rows that have seen only masked keys.

The document layout is one int32 ``[5, N]`` table (``layout.document_layout``):
document id, document start and end (first and one past the last position of the
id), and the start and end of the token's contiguous run of that id.

Helpers are decorated at import; under the interpreter ``jit.lazy_jit``'s launcher
swaps them for interpreted ones, as triton does for its own ``tl.sum``.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = [
    "DOC",
    "EDGES",
    "INTERIOR",
    "allowed",
    "head",
    "key_tile",
    "key_tile_queries",
    "layout_row",
    "load_diagonal",
    "load_qk",
    "load_rows",
    "online_softmax_update",
    "qk_dot",
    "query_tile_keys",
    "rowwise_qk",
    "store_qk",
    "store_rows",
    "tile_count",
    "tile_start",
]

# Rows of the document layout table.
DOC = tl.constexpr(0)
START = tl.constexpr(1)
END = tl.constexpr(2)
RUN_START = tl.constexpr(3)
RUN_END = tl.constexpr(4)

# Stages of the block-0 inner loop.
EDGES = tl.constexpr(1)
INTERIOR = tl.constexpr(2)


@triton.jit
def layout_row(LAYOUT, ROW: tl.constexpr, offs, valid, N, other):
    """One row of the document layout at positions ``offs`` (``other`` outside)."""
    return tl.load(LAYOUT + ROW * N + offs, mask=valid, other=other)


@triton.jit
def allowed(rows, cols, doc_rows, doc_cols, WINDOW, HAS_WINDOW: tl.constexpr):
    """Whether query ``rows`` may attend block-0 key ``cols`` (broadcast shapes).

    Out-of-range positions need no extra term: their document ids load as -1
    (queries) and -2 (keys), so only ``rows == cols`` can hold, and an out-of-range
    query or key only ever meets itself.
    """
    ok = (rows >= cols) & (doc_rows != -1) & (doc_rows == doc_cols)
    if HAS_WINDOW:
        ok = ok & (cols > rows - WINDOW)
    return ok | (rows == cols)


@triton.jit
def _interior(lo, hi, full_lo, full_hi):
    """Clamp the interior ``[full_lo, full_hi)`` into ``[lo, hi)``, in order."""
    full_lo = tl.minimum(tl.maximum(full_lo, lo), hi)
    full_hi = tl.minimum(tl.maximum(full_hi, full_lo), hi)
    return full_lo, full_hi


@triton.jit
def query_tile_keys(
    LAYOUT,
    rows,
    row_valid,
    N,
    WINDOW,
    HAS_WINDOW: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Block-0 keys the query tile ``rows`` loops over: ``lo, full_lo, full_hi, hi``.

    ``[lo, hi)`` covers every key a row of the tile can see; key tiles in
    ``[full_lo, full_hi)`` are allowed for every row (all multiples of BLOCK_N).
    """
    first = layout_row(LAYOUT, START, rows, row_valid, N, 0)
    run_first = layout_row(LAYOUT, RUN_START, rows, row_valid, N, 0)
    if HAS_WINDOW:
        first = tl.maximum(first, rows - WINDOW + 1)
        run_first = tl.maximum(run_first, rows - WINDOW + 1)
    lo = tl.min(tl.where(row_valid, first, N), axis=0) // BLOCK_N * BLOCK_N
    row0 = tl.min(rows, axis=0)
    hi = tl.minimum(row0 + BLOCK_M, N)
    full_lo = tl.cdiv(tl.max(tl.where(row_valid, run_first, 0), axis=0), BLOCK_N)
    full_lo = full_lo * BLOCK_N
    full_hi = (row0 + 1) // BLOCK_N * BLOCK_N  # key tiles wholly at or left of row0
    full_lo, full_hi = _interior(lo, hi, full_lo, full_hi)
    return lo, full_lo, full_hi, hi


@triton.jit
def key_tile_queries(
    LAYOUT,
    cols,
    col_valid,
    N,
    WINDOW,
    HAS_WINDOW: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Queries that can see the block-0 key tile ``cols``: ``lo, full_lo, full_hi,
    hi``; query tiles in ``[full_lo, full_hi)`` see every key of it (all multiples
    of BLOCK_M)."""
    last = layout_row(LAYOUT, END, cols, col_valid, N, 0)
    run_last = layout_row(LAYOUT, RUN_END, cols, col_valid, N, N)
    if HAS_WINDOW:
        last = tl.minimum(last, cols + WINDOW)
        run_last = tl.minimum(run_last, cols + WINDOW)
    last = tl.maximum(last, cols + 1)  # the diagonal (padding keys)
    hi = tl.minimum(tl.max(tl.where(col_valid, last, 0), axis=0), N)
    col0 = tl.min(cols, axis=0)
    lo = col0 // BLOCK_M * BLOCK_M
    last_col = tl.max(tl.where(col_valid, cols, col0), axis=0)
    full_lo = tl.cdiv(last_col, BLOCK_M) * BLOCK_M  # query tiles wholly at or below
    full_hi = tl.min(tl.where(col_valid, run_last, N), axis=0) // BLOCK_M * BLOCK_M
    full_lo, full_hi = _interior(lo, hi, full_lo, full_hi)
    return lo, full_lo, full_hi, hi


@triton.jit
def tile_count(bounds, BLOCK: tl.constexpr, STAGE: tl.constexpr):
    """Tiles of ``STAGE`` in ``bounds = (lo, full_lo, full_hi, hi)``: the masked
    edges ``[lo, full_lo)`` and ``[full_hi, hi)``, or the interior between.
    ``full_lo`` and ``full_hi`` are tile starts unless the interior is empty
    (then both are ``hi``)."""
    lo, full_lo, full_hi, hi = bounds
    if STAGE == EDGES:
        count = tl.cdiv(full_lo - lo, BLOCK) + tl.cdiv(hi - full_hi, BLOCK)
    else:
        count = (full_hi - full_lo) // BLOCK
    return count


@triton.jit
def tile_start(i, bounds, BLOCK: tl.constexpr, STAGE: tl.constexpr):
    """First position of tile ``i`` of ``STAGE``: edge tiles past the left edge
    continue at the right edge, over the interior."""
    lo, full_lo, full_hi, _ = bounds
    if STAGE == EDGES:
        left = tl.cdiv(full_lo - lo, BLOCK)
        start = tl.where(i < left, lo + i * BLOCK, full_hi + (i - left) * BLOCK)
    else:
        start = full_lo + i * BLOCK
    return start


@triton.jit
def load_rows(
    base, rows, stride, row_valid, D: tl.constexpr, BLOCK_D: tl.constexpr, DTYPE
):
    """Rows ``rows`` of a ``[*, D]`` matrix with row stride ``stride`` at ``base``,
    as ``[len(rows), BLOCK_D]`` in ``DTYPE`` (zeros past ``D`` and invalid rows)."""
    cols = tl.arange(0, BLOCK_D)
    mask = row_valid[:, None] & (cols[None, :] < D)
    ptrs = base + rows.to(tl.int64)[:, None] * stride + cols[None, :]
    return tl.load(ptrs, mask=mask, other=0.0).to(DTYPE)


@triton.jit
def load_qk(base, rows, stride, row_valid, D_QK, BLOCK_QK, BLOCK_QK2, SPLIT, DTYPE):
    """A q/k head's rows as a pair of tiles: columns ``[0, BLOCK_QK)`` and, with
    ``SPLIT``, ``[BLOCK_QK, BLOCK_QK + BLOCK_QK2)``; without it the second is the
    first again (never used)."""
    a = load_rows(base, rows, stride, row_valid, D_QK, BLOCK_QK, DTYPE)
    if SPLIT:
        b = load_rows(
            base + BLOCK_QK, rows, stride, row_valid, D_QK - BLOCK_QK, BLOCK_QK2, DTYPE
        )
    else:
        b = a
    return a, b


@triton.jit
def store_qk(base, rows, stride, row_valid, D_QK, BLOCK_QK, SPLIT, pair):
    """Store a pair of tiles as ``load_qk`` loaded them."""
    store_rows(base, rows, stride, row_valid, D_QK, pair[0])
    if SPLIT:
        store_rows(base + BLOCK_QK, rows, stride, row_valid, D_QK - BLOCK_QK, pair[1])


@triton.jit
def qk_dot(x, y, SPLIT, PREC):
    """``x @ y^T`` of two q/k tile pairs (one dot per part)."""
    s = tl.dot(x[0], tl.trans(y[0]), input_precision=PREC)
    if SPLIT:
        s += tl.dot(x[1], tl.trans(y[1]), input_precision=PREC)
    return s


@triton.jit
def rowwise_qk(x, y, SPLIT):
    """Row-wise dot products of two q/k tile pairs, in fp32."""
    s = tl.sum(x[0].to(tl.float32) * y[0].to(tl.float32), axis=1)
    if SPLIT:
        s += tl.sum(x[1].to(tl.float32) * y[1].to(tl.float32), axis=1)
    return s


@triton.jit
def load_diagonal(kv, rows, row_valid, j, N, D_QK, BLOCK_QK, BLOCK_QK2, SPLIT, D_V,
                  BLOCK_V, COMPUTE):  # fmt: skip
    """Keys (a q/k pair) and values ``j * N + rows`` of diagonal block ``j``: the
    only ones row ``i`` sees there; ``kv = (k_base, v_base, k_row_stride,
    v_row_stride)``."""
    k_base, v_base, skn, svn = kv
    k_j = load_qk(k_base, rows + j * N, skn, row_valid, D_QK, BLOCK_QK, BLOCK_QK2,
                  SPLIT, COMPUTE)  # fmt: skip
    v_j = load_rows(v_base, rows + j * N, svn, row_valid, D_V, BLOCK_V, COMPUTE)
    return k_j, v_j


@triton.jit
def store_rows(base, rows, stride, row_valid, D: tl.constexpr, value):
    """Store ``value`` (``[len(rows), BLOCK_D]``) into rows ``rows``, first ``D``
    columns, in the pointer's element type."""
    cols = tl.arange(0, value.shape[1])
    mask = row_valid[:, None] & (cols[None, :] < D)
    ptrs = base + rows.to(tl.int64)[:, None] * stride + cols[None, :]
    tl.store(ptrs, value.to(base.dtype.element_ty), mask=mask)


@triton.jit
def key_tile(q, rows, doc_q, kv, LAYOUT, start_n, N, WINDOW, qk_scale, D_QK, BLOCK_QK,
             BLOCK_QK2, SPLIT, D_V, BLOCK_V, HAS_WINDOW, MASKED, COMPUTE, PREC,
             BLOCK_N):  # fmt: skip
    """The block-0 key tile ``[start_n, start_n + BLOCK_N)`` for the query tile
    ``q`` (a q/k pair, rows ``rows``): base-2 scores ``[BLOCK_M, BLOCK_N]``
    (``-inf`` where not allowed, evaluated only if ``MASKED``), the key pair and
    the value tile."""
    k_base, v_base, skn, svn = kv
    cols = start_n + tl.arange(0, BLOCK_N)
    col_valid = cols < N
    k = load_qk(k_base, cols, skn, col_valid, D_QK, BLOCK_QK, BLOCK_QK2, SPLIT,
                COMPUTE)  # fmt: skip
    v = load_rows(v_base, cols, svn, col_valid, D_V, BLOCK_V, COMPUTE)
    s = qk_dot(q, k, SPLIT, PREC) * qk_scale
    if MASKED:
        doc_k = layout_row(LAYOUT, DOC, cols, col_valid, N, -2)
        ok = allowed(rows[:, None], cols[None, :], doc_q[:, None], doc_k[None, :],
                     WINDOW, HAS_WINDOW)  # fmt: skip
        s = tl.where(ok, s, float("-inf"))
    return s, k, v


@triton.jit
def head(ptr, b, h, strides):
    """Base pointer of batch ``b``, head ``h`` of a ``[B, H, L, d]`` tensor with
    ``strides = (batch, head, row)`` (int64 offsets)."""
    return ptr + b.to(tl.int64) * strides[0] + h.to(tl.int64) * strides[1]


@triton.jit
def online_softmax_update(m_i, row_max):
    """New running max, the max used as exponent offset (0 for rows with no key
    yet: never ``-inf - -inf``), and the factor rescaling what was summed so far."""
    m_new = tl.maximum(m_i, row_max)
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    return m_new, m_safe, tl.math.exp2(m_i - m_safe)
