"""Single source of truth for the device the trainer runs on.

Training runs on the current accelerator (CUDA, NPU, XPU, ...) when one is
available and falls back to CPU otherwise. Everything device-dependent in the
training stack -- the device a rank trains on, the ``torch.distributed``
backend, the autocast device type, synchronization, memory stats, and the
implementation choices that only work on accelerators -- is decided here.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from speculators.train.config.resolution import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from speculators.train.config import TrainConfig

__all__ = [
    "CPU_DEFAULT_ATTN_IMPL",
    "CPU_LOSS_IMPLS",
    "cpu_attn_impls",
    "device_fallbacks",
    "get_distributed_backend",
    "get_training_device",
    "has_accelerator",
    "memory_allocated_mb",
    "set_training_device",
    "synchronize",
    "triton_interpreter_enabled",
]

logger = logging.getLogger("speculators")

#: Draft attention implementation an unset ``draft_attn_impl`` becomes on CPU.
CPU_DEFAULT_ATTN_IMPL = "sdpa"
#: Loss implementations that run on CPU. ``fused`` is a Triton kernel; it only
#: runs on CPU under the Triton interpreter (``TRITON_INTERPRET=1``).
CPU_LOSS_IMPLS: tuple[str, ...] = ("eager",)


def has_accelerator() -> bool:
    """Whether an accelerator (CUDA, NPU, XPU, ...) is available."""
    return torch.accelerator.is_available()


def triton_interpreter_enabled() -> bool:
    """Whether Triton kernels run in the CPU interpreter (``TRITON_INTERPRET``).

    Triton's own answer, read at each call: ``triton.jit`` consults the same knob,
    which accepts ``1``, ``true``, ``on`` or ``yes``. Without Triton nothing runs
    there.
    """
    try:
        from triton import knobs  # noqa: PLC0415
    except ImportError:
        return False
    return bool(knobs.runtime.interpret)


def cpu_attn_impls() -> tuple[str, ...]:
    """Draft attention implementations that can train (forward and backward) on CPU.

    Flex attention has no CPU backward.

    :return: The implementation names.
    """
    return ("sdpa", "eager")


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


def _is_main_rank() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def device_fallbacks(
    cfg: TrainConfig, device: torch.device | None = None
) -> dict[str, str]:
    """Implementation choices to substitute so that ``cfg`` trains on ``device``.

    The resolved config stays as the user wrote it (a ``run.yaml`` written on a
    CPU machine keeps the accelerator defaults on a GPU); the trainer applies
    the returned ``{flat field name: implementation}`` to its runtime arguments.
    On an accelerator nothing is substituted. On CPU, an unset ``draft_attn_impl``
    becomes ``sdpa`` and an unset ``loss_implementation`` becomes ``eager``, each
    logged once. ``fused`` runs on CPU only under the Triton interpreter
    (``TRITON_INTERPRET=1``) and is never picked by default there, the
    interpreter being slow. MTP keeps its required attention implementation.

    :param cfg: The resolved training config (its provenance tells a default
        from an explicit choice).
    :param device: The device training runs on; defaults to this rank's.
    :return: The substitutions, empty when every choice can run on ``device``.
    :raises ConfigError: If an explicit choice cannot run on ``device``; the
        message names the choices that can.
    """
    device = get_training_device() if device is None else device
    if device.type != "cpu":
        return {}

    substitutes: dict[str, str] = {}
    errors: list[str] = []
    # MTP ignores draft_attn_impl (it must stay at its default).
    choices = [("loss", "loss_implementation")]
    if cfg.speculator_type != "mtp":
        choices.insert(0, ("draft", "draft_attn_impl"))
    for group, name in choices:
        value = getattr(getattr(cfg, group), name)
        supported = cpu_attn_impls() if group == "draft" else CPU_LOSS_IMPLS
        if value in supported or (
            value == "fused"
            and triton_interpreter_enabled()
            and _explicitly_set(cfg, group, name)
        ):
            continue
        if not _explicitly_set(cfg, group, name):
            substitutes[name] = (
                CPU_DEFAULT_ATTN_IMPL if group == "draft" else CPU_LOSS_IMPLS[0]
            )
            continue
        hint = (
            " (or set TRITON_INTERPRET=1 to run the fused Triton kernels in the "
            "slow interpreter)"
            if value == "fused"
            else ""
        )
        errors.append(
            f"--{name.replace('_', '-')} {value} cannot train on CPU (no "
            f"accelerator found); use one of: {', '.join(supported)}{hint}."
        )
    if errors:
        raise ConfigError(" ".join(errors))
    if _is_main_rank():
        for name, value in substitutes.items():
            logger.warning(
                "No accelerator found: training with %s=%s instead of %s.",
                name,
                value,
                cfg.flatten()[name],
            )
    return substitutes
