"""Data-parallel hidden-state generation under ``torchrun``.

``torchrun --nproc_per_node N [--nnodes M ...] -m speculators_kimi.datagen ...``
starts one process per device; torchrun's environment (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``) and rendezvous say which share is this
process's. Every rank plans the same batches over the whole dataset and takes
every ``WORLD_SIZE``-th of them, so the shares are deterministic and disjoint,
and each batch is computed exactly as a one-process run computes it (the same
rows, the same padding): the files are the same bytes. The ranks step in
lockstep only to sum how many files were written, for rank 0's one progress bar;
a gloo group carries those few integers whatever the device.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch

__all__ = ["Ranks", "current_ranks"]

T = TypeVar("T")


@dataclass(frozen=True)
class Ranks:
    """This process's place in the job (rank 0 of 1 without torchrun)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def share(self, items: Sequence[T]) -> list[T]:
        """This rank's items: every ``world_size``-th, from its rank on."""
        return list(items[self.rank :: self.world_size])

    def steps(self, count: int) -> int:
        """Lockstep rounds that cover every rank's share of ``count`` items."""
        return -(-count // self.world_size)

    def device(self, device: str) -> str:
        """Under torchrun, ``cuda`` means this rank's local GPU."""
        if self.distributed and device == "cuda":
            return f"cuda:{self.local_rank}"
        return device

    def total(self, count: int) -> int:
        """``count`` summed over the ranks (every rank must call it)."""
        if not self.distributed:
            return count
        value = torch.tensor([count], dtype=torch.long)
        torch.distributed.all_reduce(value)
        return int(value.item())

    def barrier(self) -> None:
        if self.distributed:
            torch.distributed.barrier()


def current_ranks() -> Ranks:
    """The ranks torchrun set up, with its process group joined (gloo)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return Ranks()
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group(backend="gloo")
    return Ranks(
        rank=torch.distributed.get_rank(),
        world_size=torch.distributed.get_world_size(),
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
    )
