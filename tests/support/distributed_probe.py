"""``python -m speculators.train`` with a look at what each rank set up.

Run by torchrun in place of ``-m speculators.train`` (same arguments). After the
trainer wrapped its model (DDP or FSDP), each rank writes
``$SPECULATORS_KIMI_PROBE/rank<R>.json``: the process group's backend, the world
size, the wrapper's class and, per trainable parameter, its type, global shape,
local (this rank's) element count and DTensor placements. A test can so assert that
gloo carried the run and that FSDP sharded the parameters, not take the log's word.

Three hooks for the fault tests, also usable without torchrun: with
``$SPECULATORS_KIMI_KILL=<rank>:<global step>`` that rank SIGKILLs itself inside
that step (after the backward, before the update), first writing
``$SPECULATORS_KIMI_PROBE/killed.json`` (the time and the sha256 of every file of
the newest checkpoint); when training ends, rank 0 writes the draft's trainable
parameters in fp32 to ``$SPECULATORS_KIMI_PROBE/final.pt`` (not under FSDP); with
``$SPECULATORS_KIMI_SLOW_SCAN=<rank>:<seconds>`` that rank reads the save path
(its checkpointer's previous epoch) that much later than the others, as a slow
rank or file system does.
"""

from __future__ import annotations

import hashlib
import json
import os
import runpy
import signal
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from speculators.train.checkpointer import BaseCheckpointer
from speculators.train.trainer import Trainer


def _param(p: torch.Tensor) -> dict[str, Any]:
    local = p.to_local() if hasattr(p, "to_local") else p
    return {
        "type": type(p).__name__,
        "shape": list(p.shape),
        "local_numel": int(local.numel()),
        # e.g. "Shard(0)", "Replicate()"
        "placements": [
            f"{type(x).__name__}({getattr(x, 'dim', '')})"
            for x in getattr(p, "placements", ())
        ],
    }


def _record(trainer: Trainer) -> None:
    out = Path(os.environ["SPECULATORS_KIMI_PROBE"])
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "backend": str(dist.get_backend()),
        "world_size": dist.get_world_size(),
        "model_class": type(trainer.model).__name__,
        "params": {
            name: _param(p)
            for name, p in trainer.model.named_parameters()
            if p.requires_grad
        },
    }
    path = out / f"rank{dist.get_rank()}.json"
    path.write_text(json.dumps(report, indent=1) + "\n")


def _probed(setup):
    def wrapper(self: Trainer, *args: Any, **kwargs: Any) -> Any:
        result = setup(self, *args, **kwargs)
        _record(self)
        return result

    return wrapper


def _newest_checkpoint(trainer: Trainer) -> Path:
    root = trainer.checkpointer.path
    return max(
        (d for d in root.iterdir() if d.name.isdigit()), key=lambda d: int(d.name)
    )


def _killed(step):
    def wrapper(self: Trainer) -> None:
        rank = dist.get_rank() if dist.is_initialized() else 0
        if os.environ.get("SPECULATORS_KIMI_KILL") == f"{rank}:{self.global_step}":
            checkpoint = _newest_checkpoint(self)
            hashes = {
                p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(checkpoint.iterdir())
            }
            report = {
                "time": time.time(),
                "checkpoint": str(checkpoint),
                "sha256": hashes,
            }
            out = Path(os.environ["SPECULATORS_KIMI_PROBE"])
            out.mkdir(parents=True, exist_ok=True)
            (out / "killed.json").write_text(json.dumps(report, indent=1) + "\n")
            os.kill(os.getpid(), signal.SIGKILL)
        step(self)

    return wrapper


def _final_weights(run):
    def wrapper(self: Trainer) -> None:
        run(self)
        model = getattr(self.model, "module", self.model)
        trained = {n: p for n, p in model.named_parameters() if p.requires_grad}
        sharded = any(hasattr(p, "to_local") for p in trained.values())  # FSDP
        if not sharded and (not dist.is_initialized() or dist.get_rank() == 0):
            params = {n: p.detach().float().cpu().clone() for n, p in trained.items()}
            out = Path(os.environ["SPECULATORS_KIMI_PROBE"])
            out.mkdir(parents=True, exist_ok=True)
            torch.save(params, out / "final.pt")

    return wrapper


def _slow_scan(scan):
    def wrapper(self: BaseCheckpointer) -> int:
        slow = os.environ.get("SPECULATORS_KIMI_SLOW_SCAN", "")
        rank, _, seconds = slow.partition(":")
        if rank and os.environ.get("RANK") == rank:
            time.sleep(float(seconds))
        return scan(self)

    return wrapper


BaseCheckpointer._get_previous_epoch = _slow_scan(  # type: ignore[method-assign]
    BaseCheckpointer._get_previous_epoch
)
Trainer._optimizers_step = _killed(Trainer._optimizers_step)  # type: ignore[method-assign]
Trainer.run_training = _final_weights(Trainer.run_training)  # type: ignore[method-assign]
Trainer._setup_model_fsdp = _probed(Trainer._setup_model_fsdp)  # type: ignore[method-assign]
Trainer._setup_model_ddp = _probed(Trainer._setup_model_ddp)  # type: ignore[method-assign]

if __name__ == "__main__":
    runpy.run_module("speculators.train", run_name="__main__", alter_sys=True)
