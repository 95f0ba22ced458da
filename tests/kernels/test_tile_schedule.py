"""How the kernels walk their tiles, under the Triton interpreter.

- The block-0 inner loop runs in two stages: ``EDGES`` visits the masked left
  edge and the masked right edge (the diagonal) through one index remap,
  ``INTERIOR`` the unmasked tiles between. Together they visit every tile of
  ``[lo, hi)`` once, whatever the bounds (an empty interior, an edge that ends
  off the tile grid).
- Programs run heaviest first: the forward's and dQ's query tiles from the last
  to the first (the last rows see the most keys), dK/dV's key tiles from the
  first (seen by the most queries).
"""

from __future__ import annotations

import pytest
import torch
import triton.language as tl
from kernel_device import interpreter_only

from speculators_kimi.kernels import tiles
from speculators_kimi.kernels.jit import lazy_jit
from speculators_kimi.kernels.tiles import EDGES, INTERIOR, tile_count, tile_start

pytestmark = interpreter_only

BLOCK = 16


def _visit_kernel(out, lo, full_lo, full_hi, hi, BLOCK: tl.constexpr,
                  STAGE: tl.constexpr):  # fmt: skip
    bounds = (lo, full_lo, full_hi, hi)
    for i in range(0, tile_count(bounds, BLOCK, STAGE)):
        tl.store(out + i, tile_start(i, bounds, BLOCK, STAGE))


# decorated at launch, as the kernels are: TRITON_INTERPRET is set by this
# directory's conftest, possibly after triton was imported
visit_kernel = lazy_jit(_visit_kernel)


def _visit(bounds: tuple[int, int, int, int]) -> dict[str, list[int]]:
    """The tile starts each stage visits, from the jit helpers themselves."""
    starts = {}
    for name, stage in (("edges", EDGES), ("interior", INTERIOR)):
        out = torch.full((64,), -1, dtype=torch.int32)
        visit_kernel()[(1,)](out, *bounds, BLOCK=BLOCK, STAGE=stage)
        starts[name] = [int(x) for x in out if x >= 0]
    return starts


# (lo, full_lo, full_hi, hi) as query_tile_keys / key_tile_queries return them:
# lo, full_lo and full_hi on the tile grid unless the interior is empty (then
# full_lo == full_hi == hi).
BOUNDS = {
    "edges and interior": (16, 48, 96, 120),
    "no left edge": (0, 0, 64, 80),
    "no interior": (32, 64, 64, 100),
    "empty interior clipped to hi": (0, 37, 37, 37),
    "one tile": (48, 50, 50, 50),
    "only interior": (0, 0, 64, 64),
    "nothing": (64, 64, 64, 64),
}


@pytest.mark.parametrize("bounds", BOUNDS.values(), ids=BOUNDS.keys())
def test_two_stages_visit_every_tile_once(bounds):
    lo, full_lo, full_hi, hi = bounds
    starts = _visit(bounds)
    left = list(range(lo, full_lo, BLOCK))
    right = list(range(full_hi, hi, BLOCK))
    assert starts["edges"] == left + right  # one remap: left edge, then right
    assert starts["interior"] == list(range(full_lo, full_hi, BLOCK))
    assert sorted(starts["edges"] + starts["interior"]) == list(range(lo, hi, BLOCK))


def _program_rows(monkeypatch, kernel_module, helper: str, n: int) -> list[int]:
    """First row (or key) of each program's tile, in the order programs ran. The
    interpreter runs the grid head by head (axis 0 outermost); a GPU issues axis
    0 fastest, so there the tile index (axis 1, checked in test_cross_compile)
    orders the waves across heads."""
    from triton.runtime.interpreter import InterpretedFunction

    real = getattr(tiles, helper)
    if not isinstance(real, InterpretedFunction):
        real = InterpretedFunction(real.fn)
    seen: list[int] = []

    def recording(layout, offs, valid, *args):
        seen.append(int(offs.handle.data.min()))  # interpreter: numpy
        return real(layout, offs, valid, *args)

    monkeypatch.setattr(kernel_module, helper, recording)
    from speculators_kimi.kernels import draft_attention

    q, k, v = (torch.rand(1, 2, n, 16, requires_grad=True) for _ in range(3))
    draft_attention(q, k, v, torch.zeros(n, dtype=torch.long)).sum().backward()
    return seen


def test_forward_and_dq_run_the_last_query_tiles_first(monkeypatch):
    from speculators_kimi.kernels import backward, configs, forward

    monkeypatch.setattr(configs, "INTERPRETER_BLOCKS", (16, 16))
    fwd = _program_rows(monkeypatch, forward, "query_tile_keys", 64)
    assert fwd == [48, 32, 16, 0] * 2  # each head's tiles, heaviest first
    dq = _program_rows(monkeypatch, backward, "query_tile_keys", 64)
    assert dq == [48, 32, 16, 0] * 2


def test_dkv_runs_the_first_key_tiles_first(monkeypatch):
    from speculators_kimi.kernels import backward, configs

    monkeypatch.setattr(configs, "INTERPRETER_BLOCKS", (16, 32))
    keys = _program_rows(monkeypatch, backward, "key_tile_queries", 64)
    assert keys == [0, 32] * 2  # key tile 0 (every query sees it) first
