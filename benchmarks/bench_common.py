"""What every benchmark here reports about its machine and its memory.

Imported by the benchmark scripts of this directory (run as
``python benchmarks/<name>.py``, so this directory is on ``sys.path``).
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = [
    "KIMI_HIDDEN",
    "KIMI_VOCAB",
    "cpu_model",
    "device_name",
    "kimi_size_verifier",
    "status",
]


def status(field: str) -> int:
    """A ``/proc/self/status`` field (``RssAnon``, ``VmHWM``...) in bytes; 0 where
    it does not exist."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


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
KIMI_VOCAB, KIMI_HIDDEN = 163840, 7168


def kimi_size_verifier(
    path: Path, vocab: int = KIMI_VOCAB, hidden: int = KIMI_HIDDEN
) -> Path:
    """The Kimi-K2.5 Hub layout (``tiny_verifier``'s skeleton) at Kimi-K2.5's sizes:
    real-size bf16 embedding, head and final norm; 61 layers, 64 heads, MLA ranks
    1536/512, head dims 128/64/128 in its config."""
    import torch

    from speculators_kimi.tiny_verifier import (
        KimiTinySpec,
        mla_text,
        write_kimi_k25_skeleton,
    )

    spec = KimiTinySpec(
        hidden_size=hidden, intermediate_size=18432, num_layers=61, num_heads=64
    )
    text = mla_text(
        spec,
        vocab_size=vocab,
        kv_lora_rank=512,
        q_lora_rank=1536,
        qk_rope_head_dim=64,
        qk_nope_head_dim=128,
        v_head_dim=128,
        rms_norm_eps=1e-5,
    )
    return write_kimi_k25_skeleton(path, text, dtype=torch.bfloat16)
