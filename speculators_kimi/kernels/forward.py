"""Triton forward kernel of the draft-head TTT attention.

Per (query tile, query head): block 0 runs as FlashAttention tiles over the keys any
row of the tile can see (``[min_r max(doc_start[r], r - W + 1), tile end)``), masking
per element; then each diagonal block ``j = 1..t`` contributes one dot product per
row, merged into the same online softmax. Stores O and the base-2 log-sum-exp
(``LSE2 = log2(sum_j 2^(s_j))`` with ``s = scale * log2(e) * q.k``), fp32.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch
import triton
import triton.language as tl

__all__ = [
    "INTERPRETER_BLOCKS",
    "KERNELS",
    "LOG2E",
    "RecordedLaunch",
    "compute_dtype",
    "dot_precision",
    "interpreting",
    "lazy_jit",
    "pick_blocks",
    "recording_launches",
    "run_forward",
]

LOG2E = 1.4426950408889634


def interpreting() -> bool:
    """Whether Triton runs kernels in the interpreter (read at call time)."""
    return bool(triton.knobs.runtime.interpret)


_JIT_CACHE: dict[tuple[Callable[..., Any], bool], Any] = {}


def _stdlib_jit_functions() -> list[tuple[Any, str, Any]]:
    """``triton.language`` helpers (``tl.sum``, ``tl.max``, ...) that are compiled
    ``JITFunction``s: triton decorated them at *its* import, so they are only
    interpretable if ``TRITON_INTERPRET=1`` was set before triton was imported."""
    from triton.runtime.jit import JITFunction

    found = []
    for mod in (tl, tl.standard, tl.core, tl.math):
        for name, value in list(vars(mod).items()):
            if isinstance(value, JITFunction):
                found.append((mod, name, value))
    return found


_INTERPRETED_STDLIB: dict[int, Any] = {}


@contextlib.contextmanager
def _interpretable_stdlib() -> Iterator[None]:
    """While launching under the interpreter, swap compiled ``triton.language``
    helpers for interpreted ones (what triton itself does when the variable is set
    before its import), then restore them."""
    from triton.runtime.interpreter import InterpretedFunction

    swapped = _stdlib_jit_functions()
    for mod, name, value in swapped:
        interp = _INTERPRETED_STDLIB.get(id(value))
        if interp is None:
            interp = InterpretedFunction(value.fn)
            _INTERPRETED_STDLIB[id(value)] = interp
        setattr(mod, name, interp)
    try:
        yield
    finally:
        for mod, name, value in swapped:
            setattr(mod, name, value)


class _Launcher:
    def __init__(self, kernel: Any, interpret: bool):
        self.kernel = kernel
        self.interpret = interpret

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        launch = self.kernel[grid]
        if not self.interpret:
            return launch  # type: ignore[no-any-return]

        def run(*args: Any, **kwargs: Any) -> Any:
            with _interpretable_stdlib():
                return launch(*args, **kwargs)

        return run


@dataclasses.dataclass(frozen=True)
class RecordedLaunch:
    """One kernel launch as a launcher issued it: the undecorated kernel function,
    the grid, the positional arguments and the keyword (constexpr and launch
    option) arguments."""

    fn: Callable[..., Any]
    grid: tuple[int, ...]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


_RECORDING: list[RecordedLaunch] | None = None


@contextlib.contextmanager
def recording_launches() -> Iterator[list[RecordedLaunch]]:
    """Record launches instead of running them (for compiling the exact launches of
    ``run_forward`` / ``run_backward`` for a GPU on a machine without one: call them
    on ``meta`` tensors inside this context)."""
    global _RECORDING
    previous, _RECORDING = _RECORDING, []
    try:
        yield _RECORDING
    finally:
        _RECORDING = previous


class _Recorder:
    def __init__(self, fn: Callable[..., Any], sink: list[RecordedLaunch]):
        self.fn = fn
        self.sink = sink

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        def record(*args: Any, **kwargs: Any) -> None:
            self.sink.append(RecordedLaunch(self.fn, tuple(grid), args, kwargs))

        return record


def lazy_jit(fn: Callable[..., Any]) -> Callable[[], Any]:
    """Decorate ``fn`` with ``triton.jit`` at first launch, not at import.

    ``triton.jit`` decides between compiler and interpreter when it decorates, so
    decorating lazily lets ``TRITON_INTERPRET=1`` be set after this module (or
    triton) was imported, e.g. by a test conftest in a larger pytest run.
    """

    def get() -> Any:
        if _RECORDING is not None:
            return _Recorder(fn, _RECORDING)
        interpret = interpreting()
        key = (fn, interpret)
        kernel = _JIT_CACHE.get(key)
        if kernel is None:
            kernel = triton.jit(fn)
            _JIT_CACHE[key] = kernel
        return _Launcher(kernel, interpret)

    return get


def compute_dtype(dtype: torch.dtype) -> Any:
    """Triton dtype of the matmul operands: the input dtype; fp32 for bf16 under
    the interpreter (which cannot do bf16 arithmetic)."""
    if dtype == torch.float32:
        return tl.float32
    if dtype == torch.float16:
        return tl.float16
    if dtype == torch.bfloat16:
        return tl.float32 if interpreting() else tl.bfloat16
    raise TypeError(f"draft_attention supports fp32/fp16/bf16, got {dtype}")


def dot_precision(dtype: torch.dtype) -> str | None:
    """fp32 inputs use exact (IEEE) matmuls, not TF32; others the target default."""
    return "ieee" if dtype == torch.float32 else None


# Tile sizes under the interpreter, where each tile step costs ~10 ms whatever its
# size; tests shrink them to cover multi-tile and BLOCK_M != BLOCK_N paths.
INTERPRETER_BLOCKS: tuple[int, int] = (64, 64)


# (BLOCK_M, BLOCK_N, num_warps, num_stages) per kernel, for 16-bit and fp32 inputs
# and head dims up to 64 / 128 / 256. Chosen without a GPU so that every kernel
# compiles for sm_90 (H100/H200) with no register spills and its shared memory
# within the limit (``python -m speculators_kimi.kernels.cross_compile``; the
# committed report is benchmarks/results/*-sm90-kernel-resources.json). Untimed:
# not autotuned on hardware yet. The diagonal dK/dV kernel is elementwise work
# on rows (BLOCK_N, num_stages unused).
KernelConfig = tuple[int, int, int, int]
_CONFIGS: dict[tuple[str, bool, int], KernelConfig] = {
    # 16-bit
    ("fwd", False, 64): (128, 64, 8, 3),
    ("dq", False, 64): (64, 64, 4, 3),
    ("dkv0", False, 64): (64, 64, 4, 3),
    ("diag", False, 64): (32, 0, 4, 1),
    ("fwd", False, 128): (128, 64, 8, 2),
    ("dq", False, 128): (64, 64, 8, 3),
    ("dkv0", False, 128): (32, 64, 8, 2),
    ("diag", False, 128): (32, 0, 8, 1),
    ("fwd", False, 256): (32, 64, 8, 2),
    ("dq", False, 256): (32, 64, 8, 2),
    ("dkv0", False, 256): (64, 32, 8, 2),
    ("diag", False, 256): (32, 0, 8, 1),
    # fp32 (IEEE matmuls: correctness runs, not speed)
    ("fwd", True, 64): (32, 64, 8, 2),
    ("dq", True, 64): (32, 64, 8, 2),
    ("dkv0", True, 64): (16, 32, 4, 2),
    ("diag", True, 64): (16, 0, 4, 1),
    ("fwd", True, 128): (32, 64, 8, 2),
    ("dq", True, 128): (32, 64, 8, 2),
    ("dkv0", True, 128): (16, 32, 4, 2),
    ("diag", True, 128): (16, 0, 4, 1),
    ("fwd", True, 256): (16, 32, 4, 1),
    ("dq", True, 256): (16, 32, 4, 1),
    ("dkv0", True, 256): (16, 32, 4, 1),
    ("diag", True, 256): (16, 0, 8, 1),
}
KERNELS = ("fwd", "dq", "dkv0", "diag")


def pick_blocks(
    head_dim_padded: int, dtype: torch.dtype = torch.bfloat16, kernel: str = "fwd"
) -> KernelConfig:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) of ``kernel`` (one of
    ``KERNELS``): one fixed config per kernel, head dim and element size."""
    if kernel not in KERNELS:
        raise ValueError(f"unknown kernel {kernel!r}; one of {KERNELS}")
    if interpreting():
        return INTERPRETER_BLOCKS[0], INTERPRETER_BLOCKS[1], 1, 1
    size = 64 if head_dim_padded <= 64 else 128 if head_dim_padded <= 128 else 256
    return _CONFIGS[(kernel, dtype == torch.float32, size)]


def _fwd_kernel(
    Q,
    K,
    V,
    Out,
    LSE,
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
    N,
    HQ,
    NUM_BLOCKS,
    WINDOW,
    qk_scale,
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

    q_base = Q + b.to(tl.int64) * sqb + h.to(tl.int64) * sqh
    k_base = K + b.to(tl.int64) * skb + hk.to(tl.int64) * skh
    v_base = V + b.to(tl.int64) * svb + hk.to(tl.int64) * svh
    qd_mask = m_valid[:, None] & d_valid[None, :]
    q = tl.load(
        q_base + rows64[:, None] * sqn + offs_d[None, :], mask=qd_mask, other=0.0
    )
    q = q.to(COMPUTE)

    doc_q = tl.load(DOC + offs_m, mask=m_valid, other=-1)
    start_q = tl.load(STARTS + offs_m, mask=m_valid, other=0)
    lo_rows = start_q
    if HAS_WINDOW:
        lo_rows = tl.maximum(lo_rows, offs_m - WINDOW + 1)
    lo_rows = tl.where(m_valid, lo_rows, N)
    lo = tl.min(lo_rows, axis=0)
    lo = (lo // BLOCK_N) * BLOCK_N
    hi = tl.minimum(pid_m * BLOCK_M + BLOCK_M, N)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

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
        s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.math.exp2(m_i - m_safe)
        p = tl.math.exp2(s - m_safe[:, None])
        p = tl.where(allowed, p, 0.0)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(COMPUTE), v, input_precision=PREC)
        m_i = m_new

    # diagonal blocks j = 1..t: key/value rows j*N + offs_m (one dot product per row);
    # q is reloaded (cache hit) rather than kept live in fp32 through the tile loop
    q32 = tl.load(
        q_base + rows64[:, None] * sqn + offs_d[None, :], mask=qd_mask, other=0.0
    )
    q32 = q32.to(COMPUTE).to(tl.float32)
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
        s_j = tl.where(m_valid, s_j, float("-inf"))
        m_new = tl.maximum(m_i, s_j)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.math.exp2(m_i - m_safe)
        p_j = tl.math.exp2(s_j - m_safe)
        l_i = l_i * alpha + p_j
        acc = acc * alpha[:, None] + p_j[:, None] * vj
        m_i = m_new

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc / l_safe[:, None]
    lse = tl.where(l_i == 0.0, 0.0, m_i + tl.math.log2(l_safe))
    o_base = Out + b.to(tl.int64) * sob + h.to(tl.int64) * soh
    tl.store(
        o_base + rows64[:, None] * son + offs_d[None, :],
        out.to(Out.dtype.element_ty),
        mask=qd_mask,
    )
    tl.store(LSE + pid_bh.to(tl.int64) * N + offs_m, lse, mask=m_valid)


fwd_kernel = lazy_jit(_fwd_kernel)


def run_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    doc: torch.Tensor,
    starts: torch.Tensor,
    scale: float,
    sliding_window: int | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the forward kernel. Returns (O like q, LSE2 fp32 [B, Hq, N])."""
    b, hq, n, d = q.shape
    hkv, kv_len = k.shape[1], k.shape[2]
    num_blocks = kv_len // n
    block_d = max(16, triton.next_power_of_2(d))
    block_m, block_n, num_warps, num_stages = pick_blocks(block_d, q.dtype, "fwd")
    o = torch.empty_like(q)
    lse = torch.empty((b, hq, n), dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(n, block_m), b * hq)
    fwd_kernel()[grid](
        q,
        k,
        v,
        o,
        lse,
        doc,
        starts,
        q.stride(0),
        q.stride(1),
        q.stride(2),
        k.stride(0),
        k.stride(1),
        k.stride(2),
        v.stride(0),
        v.stride(1),
        v.stride(2),
        o.stride(0),
        o.stride(1),
        o.stride(2),
        n,
        hq,
        num_blocks,
        sliding_window if sliding_window is not None else 0,
        scale * LOG2E,
        D=d,
        BLOCK_D=block_d,
        GROUP=hq // hkv,
        HAS_WINDOW=sliding_window is not None,
        COMPUTE=compute_dtype(q.dtype),
        PREC=dot_precision(q.dtype),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return o, lse
