"""One torchrun rank: ``--sp-size`` with the ``triton`` draft attention backend.

``python -m torch.distributed.run --nproc-per-node W sp_kernel_probe.py OUT``
(``TRITON_INTERPRET=1`` on CPU, gloo): every rank trains the tiny draft of
:mod:`tiny_drafts` with ``--draft-attn-impl triton`` for one step on one process,
then the same step with the sequence split over all ``W`` ranks (the wrapper runs
the kernels on each rank's heads over the whole sequence; DDP averages the
gradients as the trainer does). Rank 0 writes ``OUT`` (JSON): the largest absolute
difference of the loss and of every parameter's gradient, and the reference's
largest gradient (the scale of those differences).
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import torch.distributed as dist
from speculators.models.eagle3 import sequence_parallel as sp
from speculators.train import distributed as train_dist
from tiny_drafts import TTT_STEPS, step_batch, tiny_eagle3, train_step
from torch.nn.parallel import DistributedDataParallel


def main(out: str) -> None:
    dist.init_process_group("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    train_dist._init_sp_process_groups(rank, world, world)
    model = tiny_eagle3("triton")
    batch = step_batch()
    ref = train_step(copy.deepcopy(model), **batch)
    ours = train_step(
        DistributedDataParallel(copy.deepcopy(model)),
        **sp.split_batch(batch, train_dist.get_sp_rank(), world, TTT_STEPS),
        sp_group=train_dist.get_sp_group(),
    )
    if rank == 0:
        diffs = {k: float((ours[k] - ref[k]).abs().max()) for k in ref}
        scale = max(float(ref[k].abs().max()) for k in ref)
        Path(out).write_text(json.dumps({"diffs": diffs, "scale": scale}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
