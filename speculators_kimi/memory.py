"""This process's memory as the kernel counts it (``/proc/self/status``).

One answer for every report that states its memory: ``vllm-check``'s and the
benchmarks'. ``RssAnon`` (anonymous memory: heap, tensors) is what the process
itself holds; ``VmHWM`` (peak resident set) also counts mapped files' pages, such
as mmapped safetensors.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["process_memory", "status_bytes"]


def status_bytes(field: str) -> int:
    """A ``/proc/self/status`` field (``RssAnon``, ``VmHWM``...) in bytes; 0 where
    it does not exist (not Linux, or an older kernel)."""
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def process_memory() -> dict[str, int]:
    """Anonymous memory now and the peak resident set, in bytes."""
    return {
        "rss_anon_bytes": status_bytes("RssAnon"),
        "vm_hwm_bytes": status_bytes("VmHWM"),
    }
