"""What every benchmark here reports about its machine and its memory
(:func:`speculators_kimi.memory.process_memory`).

Imported by the benchmark scripts of this directory (run as
``python benchmarks/<name>.py``, so this directory is on ``sys.path``).
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import TYPE_CHECKING

from speculators_kimi.memory import process_memory
from speculators_kimi.tiny_verifier.configs import KIMI_K25_TEXT

if TYPE_CHECKING:
    import torch

__all__ = [
    "KIMI_HIDDEN",
    "KIMI_VOCAB",
    "cpu_model",
    "device_name",
    "kimi_size_verifier",
    "process_memory",
]


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU's with how Triton kernels run on it."""
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    from speculators_kimi.kernels.jit import interpreting

    mode = "Triton interpreter" if interpreting() else "no Triton"
    return f"CPU {cpu_model()} ({mode})"


#: Kimi-K2.5's vocabulary and hidden size.
KIMI_VOCAB, KIMI_HIDDEN = KIMI_K25_TEXT["vocab_size"], KIMI_K25_TEXT["hidden_size"]


def kimi_size_verifier(
    path: Path, vocab: int = KIMI_VOCAB, hidden: int = KIMI_HIDDEN
) -> Path:
    """The Kimi-K2.5 Hub layout (``tiny_verifier``'s skeleton) at Kimi-K2.5's sizes:
    real-size bf16 embedding, head and final norm; the rest of its config is
    :data:`~speculators_kimi.tiny_verifier.configs.KIMI_K25_TEXT`."""
    import torch

    from speculators_kimi.tiny_verifier import mla_text, write_kimi_k25_skeleton

    sizes = {"vocab_size": vocab, "hidden_size": hidden, "rms_norm_eps": 1e-5}
    text = mla_text(**{**KIMI_K25_TEXT, **sizes})
    return write_kimi_k25_skeleton(path, text, dtype=torch.bfloat16)
