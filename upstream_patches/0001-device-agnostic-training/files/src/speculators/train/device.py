"""Single source of truth for the device the trainer runs on.

Training runs on the current accelerator (CUDA, NPU, XPU, ...) when one is
available and falls back to CPU otherwise. Everything device-dependent in the
training stack -- the device a rank trains on, the ``torch.distributed``
backend, the autocast device type, synchronization, memory stats, and the
config defaults that only work on accelerators -- is decided here.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    from collections.abc import Mapping

    from speculators.train.config import TrainConfig

__all__ = [
    "CPU_ATTN_IMPLS",
    "CPU_LOSS_IMPLS",
    "get_distributed_backend",
    "get_training_device",
    "has_accelerator",
    "memory_allocated_mb",
    "resolve_device_defaults",
    "set_training_device",
    "synchronize",
    "triton_interpreter_enabled",
]

logger = logging.getLogger("speculators")

#: Draft attention implementations that can train (forward and backward) on CPU.
#: Flex attention has no CPU backward.
CPU_ATTN_IMPLS: tuple[str, ...] = ("sdpa", "eager")
#: Loss implementations that run on CPU. ``fused`` is a Triton kernel; it only
#: runs on CPU under the Triton interpreter (``TRITON_INTERPRET=1``).
CPU_LOSS_IMPLS: tuple[str, ...] = ("eager",)


def has_accelerator() -> bool:
    """Whether an accelerator (CUDA, NPU, XPU, ...) is available."""
    return torch.accelerator.is_available()


def triton_interpreter_enabled() -> bool:
    """Whether Triton kernels run in the CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def get_training_device(local_rank: int | None = None) -> torch.device:
    """The device this rank trains on.

    ``<accelerator>:<local_rank>`` when an accelerator is available, else CPU.
    ``local_rank`` defaults to the ``LOCAL_RANK`` environment variable (0 when
    unset).
    """
    if not has_accelerator():
        return torch.device("cpu")
    acc = torch.accelerator.current_accelerator()
    if acc is None:
        return torch.device("cpu")
    if local_rank is None:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    return torch.device(acc.type, local_rank)


def set_training_device(local_rank: int) -> torch.device:
    """Make ``local_rank``'s device current (a no-op on CPU) and return it."""
    device = get_training_device(local_rank)
    if device.type != "cpu":
        torch.accelerator.set_device_index(device.index)
    return device


def get_distributed_backend(device: torch.device) -> str:
    """The default ``torch.distributed`` backend for ``device``.

    NCCL on CUDA, the vendor backend on other accelerators, gloo on CPU.
    """
    return dist.get_default_backend_for_device(device)


def synchronize() -> None:
    """Wait for queued accelerator work; a no-op on CPU."""
    if has_accelerator():
        torch.accelerator.synchronize()


def memory_allocated_mb() -> float | None:
    """Accelerator memory held by tensors, in MiB; ``None`` on CPU."""
    if not has_accelerator():
        return None
    return torch.accelerator.memory_allocated() / (1024**2)


def _explicitly_set(cfg: TrainConfig, group: str, name: str) -> bool:
    """Whether the user chose ``group.name`` (via flag or YAML) rather than
    inheriting the schema default."""
    provenance: Mapping[str, str] = cfg.provenance
    if name in provenance:
        return provenance[name] != "default"
    # Built without the resolution layer (e.g. ``TrainConfig.from_flat``):
    # fall back to pydantic's record of explicitly passed fields.
    return name in getattr(cfg, group).model_fields_set


def resolve_device_defaults(cfg: TrainConfig) -> None:
    """Adapt accelerator-only defaults when training without an accelerator.

    Without an accelerator, an unset ``draft_attn_impl`` becomes ``sdpa`` and an
    unset ``loss_implementation`` becomes ``eager``; with one, nothing changes.
    An explicit choice that cannot run on CPU raises ``ValueError`` naming the
    choices that can. ``fused`` is accepted on CPU only when the Triton
    interpreter is enabled (``TRITON_INTERPRET=1``), and is never picked by
    default there because the interpreter is slow.

    The config is modified in place.
    """
    if has_accelerator():
        return

    errors: list[str] = []
    # MTP ignores draft_attn_impl (it must stay at its default), so only the
    # loss implementation is device-dependent there.
    if cfg.speculator_type != "mtp":
        attn = cfg.draft.draft_attn_impl
        if attn not in CPU_ATTN_IMPLS:
            if _explicitly_set(cfg, "draft", "draft_attn_impl"):
                errors.append(
                    f"--draft-attn-impl {attn} cannot train on CPU (no accelerator "
                    f"found); use one of: {', '.join(CPU_ATTN_IMPLS)}."
                )
            else:
                cfg.draft.draft_attn_impl = CPU_ATTN_IMPLS[0]  # type: ignore[assignment]
                logger.warning(
                    "No accelerator found: using draft_attn_impl=%s instead of %s.",
                    CPU_ATTN_IMPLS[0],
                    attn,
                )

    loss = cfg.loss.loss_implementation
    if loss not in CPU_LOSS_IMPLS:
        if not _explicitly_set(cfg, "loss", "loss_implementation"):
            cfg.loss.loss_implementation = CPU_LOSS_IMPLS[0]  # type: ignore[assignment]
            logger.warning(
                "No accelerator found: using loss_implementation=%s instead of %s.",
                CPU_LOSS_IMPLS[0],
                loss,
            )
        elif not (loss == "fused" and triton_interpreter_enabled()):
            errors.append(
                f"--loss-implementation {loss} cannot run on CPU (no accelerator "
                f"found); use one of: {', '.join(CPU_LOSS_IMPLS)} (or set "
                "TRITON_INTERPRET=1 to run the fused Triton kernels in the slow "
                "interpreter)."
            )
    if errors:
        raise ValueError(" ".join(errors))
