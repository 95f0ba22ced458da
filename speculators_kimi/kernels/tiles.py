"""``triton.jit`` helpers every draft-attention kernel is built from.

- ``allowed``: the block-0 mask of (query, key) pairs. The broadcast shapes of its
  arguments pick the orientation: ``[M, 1] x [1, N]`` for a query tile against a
  key tile (forward, dQ), ``[1, M] x [N, 1]`` for the transposed tile (dK/dV).
- ``query_tile_keys`` / ``key_tile_queries``: the block-0 range a tile loops over,
  split into masked edges and an interior of full tiles. Interior tiles (every
  pair allowed: below the diagonal, inside one run of a document for every row,
  inside the window) run without the per-element mask; only tiles touching the
  diagonal, a document start or end, padding or the window edge pay for it.
- ``load_rows`` / ``store_rows``: masked row loads and stores with int64 offsets;
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
    "allowed",
    "head",
    "key_tile",
    "key_tile_queries",
    "layout_row",
    "load_diagonal",
    "load_rows",
    "online_softmax_update",
    "query_tile_keys",
    "store_rows",
]

# Rows of the document layout table.
DOC = tl.constexpr(0)
START = tl.constexpr(1)
END = tl.constexpr(2)
RUN_START = tl.constexpr(3)
RUN_END = tl.constexpr(4)


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
def load_diagonal(
    k_base,
    v_base,
    skn,
    svn,
    rows,
    row_valid,
    j,
    N,
    D_QK: tl.constexpr,
    D_V: tl.constexpr,
    BLOCK_QK: tl.constexpr,
    BLOCK_V: tl.constexpr,
    COMPUTE: tl.constexpr,
):
    """Keys and values ``j * N + rows`` of diagonal block ``j`` (the only ones row
    ``i`` sees there), rounded to ``COMPUTE`` and held in fp32 for row-wise dots."""
    k_j = load_rows(k_base, rows + j * N, skn, row_valid, D_QK, BLOCK_QK, COMPUTE)
    v_j = load_rows(v_base, rows + j * N, svn, row_valid, D_V, BLOCK_V, COMPUTE)
    return k_j.to(tl.float32), v_j.to(tl.float32)


@triton.jit
def store_rows(base, rows, stride, row_valid, D: tl.constexpr, value):
    """Store ``value`` (``[len(rows), BLOCK_D]``) into rows ``rows``, first ``D``
    columns, in the pointer's element type."""
    cols = tl.arange(0, value.shape[1])
    mask = row_valid[:, None] & (cols[None, :] < D)
    ptrs = base + rows.to(tl.int64)[:, None] * stride + cols[None, :]
    tl.store(ptrs, value.to(base.dtype.element_ty), mask=mask)


@triton.jit
def key_tile(
    q,
    rows,
    doc_q,
    k_base,
    v_base,
    skn,
    svn,
    LAYOUT,
    start_n,
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
    """The block-0 key tile ``[start_n, start_n + BLOCK_N)`` for the query tile
    ``q`` (rows ``rows``): base-2 scores ``[BLOCK_M, BLOCK_N]`` (``-inf`` where not
    allowed, evaluated only if ``MASKED``), and the key and value tiles."""
    cols = start_n + tl.arange(0, BLOCK_N)
    col_valid = cols < N
    k = load_rows(k_base, cols, skn, col_valid, D_QK, BLOCK_QK, COMPUTE)
    v = load_rows(v_base, cols, svn, col_valid, D_V, BLOCK_V, COMPUTE)
    s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale
    if MASKED:
        doc_k = layout_row(LAYOUT, DOC, cols, col_valid, N, -2)
        ok = allowed(
            rows[:, None], cols[None, :], doc_q[:, None], doc_k[None, :], WINDOW,
            HAS_WINDOW,
        )  # fmt: skip
        s = tl.where(ok, s, float("-inf"))
    return s, k, v


@triton.jit
def head(ptr, b, h, stride_b, stride_h):
    """Base pointer of batch ``b``, head ``h`` (int64 offsets)."""
    return ptr + b.to(tl.int64) * stride_b + h.to(tl.int64) * stride_h


@triton.jit
def online_softmax_update(m_i, row_max):
    """New running max, the max used as exponent offset (0 for rows with no key
    yet: never ``-inf - -inf``), and the factor rescaling what was summed so far."""
    m_new = tl.maximum(m_i, row_max)
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    return m_new, m_safe, tl.math.exp2(m_i - m_safe)
