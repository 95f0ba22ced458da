"""The document layout table: what every kernel knows of a packed sequence.

It sits apart from the dense oracle in :mod:`.reference` because production needs
it (``draft_attention`` and ``--draft-attn-impl triton`` build it once per batch),
and apart from :mod:`.tiles` because it is plain PyTorch (no Triton import). The
rows are the ones ``tiles`` reads (``DOC``, ``START``, ``END``, ``RUN_START``,
``RUN_END``).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["document_layout"]


def document_layout(document_ids: Tensor) -> Tensor:
    """What the kernels know of a packed sequence: int32 ``[5, N]``.

    Rows: the document id; the document's start and end (first and one past the
    last position holding the id: the span its tokens may look back over); the
    start and end of the token's contiguous run of that id (the span where every
    pair is in one document). Padding tokens (id -1) get ``[i, i + 1)`` for both.
    Compute once per batch and pass to ``draft_attention(..., layout=...)`` to
    reuse it across layers and TTT steps.
    """
    if document_ids.dim() != 1:
        raise ValueError(
            f"document_ids must be 1-D [N], got {tuple(document_ids.shape)}"
        )
    ids = document_ids.long()
    n = ids.numel()
    pos = torch.arange(n, device=ids.device, dtype=torch.long)
    if n == 0:
        return torch.empty(5, 0, dtype=torch.int32, device=ids.device)
    values, inverse = torch.unique(ids, return_inverse=True)
    lowest, highest = values[[0, -1]].tolist()
    if lowest < -(2**31) or highest >= 2**31:
        raise ValueError(
            f"document ids must fit in int32 (the kernels' layout), got "
            f"{lowest}..{highest}: number the documents 0..D-1 and padding -1, as "
            "upstream's data collator does"
        )
    num = values.numel()
    first = torch.full((num,), n, dtype=torch.long, device=ids.device)
    last = torch.full((num,), -1, dtype=torch.long, device=ids.device)
    first = first.scatter_reduce(0, inverse, pos, reduce="amin")
    last = last.scatter_reduce(0, inverse, pos, reduce="amax")
    pad = ids == -1
    new_run = torch.ones_like(pad)
    new_run[1:] = (ids[1:] != ids[:-1]) | pad[1:]
    run_start = torch.where(new_run, pos, 0).cummax(0).values
    ends_run = torch.ones_like(pad)
    ends_run[:-1] = new_run[1:]
    run_end = torch.where(ends_run, pos + 1, n).flip(0).cummin(0).values.flip(0)
    layout = torch.stack(
        (
            ids,
            torch.where(pad, pos, first[inverse]),
            torch.where(pad, pos + 1, last[inverse] + 1),
            run_start,
            run_end,
        )
    )
    return layout.to(torch.int32)
