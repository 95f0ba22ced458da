"""XPress's block as vLLM 0.34 drafts it: Jacobi passes of the refiner head over
the backbone's base logits (``XPressRefinerHead.jacobi_refine_greedy``, which
vLLM runs as Triton kernels; this is the same recurrence in PyTorch).

The block is ``[anchor, slot 1, ..., slot B-1]`` (the fill-in layout). Its
first guess is each slot's base argmax; each pass then re-picks every slot at
once from the base logits plus the refiner's bias for the tokens of the
previous pass: slot ``k`` reads token ``k - 1`` of the block, and the anchor
reads itself (vLLM's speculator cannot reach the token before the anchor, so
the anchor stands in for it). vLLM runs a fixed number of passes
(``xpress_num_passes``; training's ``num_jacobi_passes``) and picks among each
slot's top-C base candidates (``xpress_topc``; 0: the whole vocabulary), so the
block is the sequential greedy decode only when C is 0 and the passes reach
``B - 1``: the mixer is causal over the slots, so pass ``j`` settles slot
``j``.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["jacobi_block"]


def _picker(base: torch.Tensor, topc: int):  # type: ignore[no-untyped-def]
    """The argmax of rows of ``base``'s shape, among ``base``'s top ``topc``
    candidates of each row (computed once, as vLLM does) when ``topc`` is
    positive and below the vocabulary."""
    if topc <= 0 or topc >= base.shape[-1]:
        return lambda rows: rows.argmax(dim=-1)
    candidates = base.topk(topc, dim=-1).indices

    def pick(rows: torch.Tensor) -> torch.Tensor:
        best = rows.gather(-1, candidates).argmax(dim=-1, keepdim=True)
        return candidates.gather(-1, best).squeeze(-1)

    return pick


@torch.no_grad()
def jacobi_block(
    refiner: Any,
    base: torch.Tensor,
    hidden: torch.Tensor,
    anchor: int,
    *,
    passes: int,
    topc: int,
) -> list[int]:
    """The block's proposals (draft ids of slots ``1 .. B-1``).

    :param refiner: upstream's ``XPressRefinerHead``.
    :param base: the backbone's logits of every slot ``[B, vocab]``.
    :param hidden: the backbone's final hidden states of every slot
        ``[B, hidden]`` (the refiner's block summary averages all of them).
    :param anchor: the anchor's token id.
    """
    rows = base[1:].float()
    pick = _picker(rows, topc)
    dtype = refiner.down_h.weight.dtype
    cache = refiner.hidden_cache(hidden[None].to(dtype))
    first = torch.tensor([anchor], device=base.device)
    block = torch.cat([first, pick(rows)])
    for _ in range(passes):
        previous = torch.cat([first, block[:-1]])
        bias = refiner.block_bias(previous[None], hcache=cache)[0, 1:]
        block = torch.cat([first, pick(rows + bias.float())])
    return [int(t) for t in block[1:]]
