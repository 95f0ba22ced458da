"""``python -m speculators.train`` with a look at what each rank set up.

Run by torchrun in place of ``-m speculators.train`` (same arguments). After the
trainer wrapped its model (DDP or FSDP), each rank writes
``$SPECULATORS_KIMI_PROBE/rank<R>.json``: the process group's backend, the world
size, the wrapper's class and, per trainable parameter, its type, global shape,
local (this rank's) element count and DTensor placements. A test can so assert that
gloo carried the run and that FSDP sharded the parameters, not take the log's word.
"""

from __future__ import annotations

import json
import os
import runpy
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
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


Trainer._setup_model_fsdp = _probed(Trainer._setup_model_fsdp)  # type: ignore[method-assign]
Trainer._setup_model_ddp = _probed(Trainer._setup_model_ddp)  # type: ignore[method-assign]

if __name__ == "__main__":
    runpy.run_module("speculators.train", run_name="__main__", alter_sys=True)
