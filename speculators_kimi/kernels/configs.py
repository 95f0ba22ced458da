"""Tile configurations of the draft-attention kernels, one per kernel and shape.

The block-0 kernels take the shapes the fast Hopper attentions use (FlashAttention
2/3 and flex: 128 query rows x 64 keys for the forward and dQ, 128 keys x 64 query
rows for dK/dV, 8 warps, 3 stages) so that every dot compiles to a warpgroup MMA
(``wgmma``) on sm_90; a small register spill is accepted rather than a smaller
tile that drops to Ampere's ``mma.sync``. ``python -m
speculators_kimi.kernels.cross_compile`` checks both without a GPU (committed:
``benchmarks/results/*-sm90-kernel-resources.json``); timings on a GPU come from
``benchmarks/kernel_tiles.py``'s sweep, and pick among these shapes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import torch
import triton

from .jit import LOG2E, compute_dtype, dot_precision, interpreting

__all__ = [
    "INTERPRETER_BLOCKS",
    "KERNELS",
    "KernelConfig",
    "LaunchShape",
    "head_blocks",
    "parse_tiles",
    "pick_blocks",
    "split_head",
    "tile_overrides",
]

#: (BLOCK_M, BLOCK_N, num_warps, num_stages).
KernelConfig = tuple[int, int, int, int]

#: The launches of one forward + backward call, in order.
KERNELS = ("fwd", "diag", "dq", "dkv0")

# Tile sizes under the interpreter, where a tile step costs about the same whatever
# its size; tests shrink them to cover multi-tile and BLOCK_M != BLOCK_N paths.
INTERPRETER_BLOCKS: tuple[int, int] = (64, 64)

# Keyed by (kernel, fp32 inputs, padded q/k head dim, padded v head dim). The
# (256, 128) rows are MLA drafts (DeepSeek-V3 / Kimi-K2.5: q/k 192 = nope 128 +
# rope 64, v 128). The diagonal kernel works elementwise on rows: its BLOCK_M is
# rows x TTT steps per program (BLOCK_N and num_stages unused). fp32 rows are IEEE
# matmuls: correctness runs, not speed; at q/k 256 their dQ spills whatever the
# tile (reported by cross_compile).
_CONFIGS: dict[tuple[str, bool, int, int], KernelConfig] = {
    # 16-bit
    ("fwd", False, 64, 64): (128, 64, 4, 3),
    ("dq", False, 64, 64): (128, 64, 8, 3),
    ("dkv0", False, 64, 64): (64, 128, 8, 3),
    ("diag", False, 64, 64): (32, 0, 4, 1),
    ("fwd", False, 128, 128): (128, 64, 8, 3),
    ("dq", False, 128, 128): (128, 64, 8, 3),
    ("dkv0", False, 128, 128): (64, 128, 8, 3),
    ("diag", False, 128, 128): (32, 0, 8, 1),
    ("fwd", False, 256, 128): (128, 64, 8, 3),
    ("dq", False, 256, 128): (128, 64, 8, 2),
    ("dkv0", False, 256, 128): (64, 128, 8, 2),
    ("diag", False, 256, 128): (32, 0, 8, 1),
    ("fwd", False, 256, 256): (64, 64, 8, 2),
    ("dq", False, 256, 256): (64, 64, 8, 2),
    ("dkv0", False, 256, 256): (64, 64, 8, 1),
    ("diag", False, 256, 256): (16, 0, 8, 1),
    # fp32
    ("fwd", True, 64, 64): (32, 64, 8, 2),
    ("dq", True, 64, 64): (32, 64, 8, 2),
    ("dkv0", True, 64, 64): (16, 32, 4, 2),
    ("diag", True, 64, 64): (16, 0, 4, 1),
    ("fwd", True, 128, 128): (32, 64, 8, 2),
    ("dq", True, 128, 128): (16, 64, 4, 2),
    ("dkv0", True, 128, 128): (16, 32, 4, 2),
    ("diag", True, 128, 128): (16, 0, 4, 1),
    ("fwd", True, 256, 128): (16, 32, 4, 1),
    ("dq", True, 256, 128): (16, 16, 8, 1),
    ("dkv0", True, 256, 128): (16, 32, 4, 1),
    ("diag", True, 256, 128): (16, 0, 8, 1),
    ("fwd", True, 256, 256): (16, 32, 4, 1),
    ("dq", True, 256, 256): (16, 16, 8, 1),
    ("dkv0", True, 256, 256): (16, 16, 4, 1),
    ("diag", True, 256, 256): (16, 0, 8, 1),
}


_OVERRIDES: dict[str, KernelConfig] = {}


@contextlib.contextmanager
def tile_overrides(overrides: Mapping[str, KernelConfig]) -> Iterator[None]:
    """Launch the named kernels (``KERNELS``) with these configs instead of the
    table's, whatever the shape: for the device tile sweep, which checks each
    candidate against the default tiles' outputs before timing it."""
    unknown = set(overrides) - set(KERNELS)
    if unknown:
        raise ValueError(f"unknown kernels {sorted(unknown)}; one of {KERNELS}")
    previous = dict(_OVERRIDES)
    _OVERRIDES.update(overrides)
    try:
        yield
    finally:
        _OVERRIDES.clear()
        _OVERRIDES.update(previous)


def parse_tiles(spec: str) -> tuple[str, list[KernelConfig]]:
    """``KERNEL=BMxBNxWxS[,...]`` (``dkv0=64x128x8x3,32x128x4x3``): a kernel of
    ``KERNELS`` and its configs, as the tile sweep and the cross-compile take them."""
    kernel, _, configs = spec.partition("=")
    if kernel not in KERNELS:
        raise ValueError(f"{spec!r}: unknown kernel {kernel!r}; one of {KERNELS}")
    parsed: list[KernelConfig] = []
    for config in configs.split(","):
        parts = config.split("x")
        if len(parts) != 4 or not all(part.isdigit() for part in parts):
            raise ValueError(
                f"{spec!r}: {config!r} is not BLOCK_MxBLOCK_NxWARPSxSTAGES "
                "(e.g. 64x128x8x3)"
            )
        block_m, block_n, warps, stages = (int(part) for part in parts)
        parsed.append((block_m, block_n, warps, stages))
    return kernel, parsed


def split_head(d_qk: int) -> tuple[int, int, bool]:
    """How the dots take a q/k head: ``(A, B, split)``. A head that is not a power
    of two is held as two tiles of A + B columns (MLA's 192 = 128 + 64) when that is
    narrower than padding it to the next power of two; each part is its own dot
    (Hopper's wgmma takes 64 and 128, while 192 padded to 256 leaves the kernels
    on ``mma.sync``). Unsplit heads have ``B = 16`` (an unused dummy)."""
    padded = max(16, triton.next_power_of_2(d_qk))
    first = padded // 2
    if d_qk > 16 and d_qk != padded:
        rest = max(16, triton.next_power_of_2(d_qk - first))
        if first + rest < padded:
            return first, rest, True
    return padded, 16, False


def head_blocks(d_qk: int, d_v: int) -> tuple[int, int]:
    """Tile widths of the q/k and v heads: the next powers of two, at least 16
    (``tl.arange`` and ``tl.dot`` need them); columns past the head are masked."""
    return max(16, triton.next_power_of_2(d_qk)), max(16, triton.next_power_of_2(d_v))


def _bucket(block_dim: int) -> int:
    return 64 if block_dim <= 64 else 128 if block_dim <= 128 else 256


def pick_blocks(
    block_qk: int,
    block_v: int | None = None,
    dtype: torch.dtype = torch.bfloat16,
    kernel: str = "fwd",
) -> KernelConfig:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) of ``kernel`` (one of
    ``KERNELS``) for padded q/k and v head dims (``block_v`` defaults to
    ``block_qk``). A v dim other than the q/k dim has its own rows only for MLA's
    (256, 128); others use the wider dim's config."""
    if kernel not in KERNELS:
        raise ValueError(f"unknown kernel {kernel!r}; one of {KERNELS}")
    if kernel in _OVERRIDES:
        return _OVERRIDES[kernel]
    if interpreting():
        return INTERPRETER_BLOCKS[0], INTERPRETER_BLOCKS[1], 1, 1
    qk = _bucket(block_qk)
    v = _bucket(block_qk if block_v is None else block_v)
    key = (kernel, dtype == torch.float32, qk, v)
    if key not in _CONFIGS:
        wide = max(qk, v)
        key = (kernel, dtype == torch.float32, wide, wide)
    return _CONFIGS[key]


@dataclass(frozen=True)
class LaunchShape:
    """What every kernel launch of one attention call shares (forward and
    backward): heads, dtype, window and scale; the constexprs, tiles and scalars
    the launchers pass are derived from them."""

    d_qk: int
    d_v: int
    group: int
    dtype: torch.dtype
    sliding_window: int | None
    scale: float

    @property
    def shape(self) -> dict[str, object]:
        """The head-shape constexprs of the kernels that take q/k in dots (a split
        head: ``split_head``)."""
        block_qk, block_qk2, split = split_head(self.d_qk)
        return {
            "D_QK": self.d_qk,
            "BLOCK_QK": block_qk,
            "BLOCK_QK2": block_qk2,
            "SPLIT": split,
            "D_V": self.d_v,
            "BLOCK_V": head_blocks(self.d_qk, self.d_v)[1],
            "GROUP": self.group,
            "COMPUTE": compute_dtype(self.dtype),
        }

    @property
    def rowwise_shape(self) -> dict[str, object]:
        """The head-shape constexprs of the diagonal kernel: element-wise
        row dots, so a head is one tile padded to a power of two."""
        block_qk, block_v = head_blocks(self.d_qk, self.d_v)
        return {
            "D_QK": self.d_qk,
            "BLOCK_QK": block_qk,
            "D_V": self.d_v,
            "BLOCK_V": block_v,
            "GROUP": self.group,
            "COMPUTE": compute_dtype(self.dtype),
        }

    @property
    def block0(self) -> dict[str, object]:
        """Block 0's window flag and dot precision."""
        return {
            "HAS_WINDOW": self.sliding_window is not None,
            "PREC": dot_precision(self.dtype),
        }

    @property
    def window(self) -> int:
        return self.sliding_window if self.sliding_window is not None else 0

    @property
    def qk_scale(self) -> float:
        return self.scale * LOG2E

    def blocks(self, kernel: str) -> KernelConfig:
        """(BLOCK_M, BLOCK_N, num_warps, num_stages) of ``kernel``."""
        return pick_blocks(*head_blocks(self.d_qk, self.d_v), self.dtype, kernel)
