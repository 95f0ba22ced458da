"""What every benchmark here reports about its machine and its memory
(:func:`speculators_kimi.memory.process_memory`).

Imported by the benchmark scripts of this directory (run as
``python benchmarks/<name>.py``, so this directory is on ``sys.path``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from speculators_kimi.cli_args import save_json_report
from speculators_kimi.memory import process_memory
from speculators_kimi.tiny_verifier.configs import KIMI_K25_TEXT

if TYPE_CHECKING:
    import torch

__all__ = [
    "DRAFT_VERIFIERS",
    "KIMI_HIDDEN",
    "KIMI_K25_DRAFT",
    "KIMI_VOCAB",
    "DraftGeometry",
    "cpu_model",
    "device_name",
    "draft_layer",
    "export_and_vllm_check",
    "kernel_report",
    "kimi_size_verifier",
    "one_layer_draft",
    "pristine_upstream",
    "process_memory",
    "save_cpu_report",
    "timing_method",
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


def save_cpu_report(
    benchmark: str, repeats: int, results: dict[str, Any], path: Path | None
) -> None:
    """A CPU benchmark's JSON report, written to ``path`` (nothing when None):
    what ran it, when, how often, and its ``results``."""
    report = {
        "benchmark": benchmark,
        "date": dt.date.today().isoformat(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "repeats": repeats,
        "results": results,
    }
    save_json_report(report, path, show=False)


def pristine_upstream(workdir: Path) -> Path:
    """``src`` of pristine upstream, extracted from the pinned, hash-checked sdist."""
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root))
    from tools.vendorlib.pin import load_pin
    from tools.vendorlib.sdist import extract, obtain

    pin = load_pin(root)
    dest = workdir / "upstream"
    shutil.rmtree(dest, ignore_errors=True)  # a kept workdir: extract afresh
    extract(obtain(pin.name, pin.version, pin.sdist, pin.sha256), dest)
    return dest / "src"


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU's with how Triton kernels run on it."""
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    from speculators_kimi.kernels.jit import interpreting

    mode = "Triton interpreter" if interpreting() else "no Triton"
    return f"CPU {cpu_model()} ({mode})"


def kernel_report(benchmark: str, device: torch.device, quick: bool) -> dict[str, Any]:
    """The head of a Triton kernel benchmark's JSON report: what ran it, when,
    with which torch and Triton, and whether it was a ``--quick`` run."""
    import torch
    import triton

    return {
        "benchmark": benchmark,
        "device": device_name(device),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "quick": quick,
    }


def timing_method(device: torch.device) -> str:
    """How a kernel benchmark's times were taken (the interpreter's are no
    performance figure)."""
    if device.type == "cuda":
        return "triton.testing.do_bench median"
    return "perf_counter median (interpreter; not a performance figure)"


#: Kimi-K2.5's vocabulary and hidden size.
KIMI_VOCAB, KIMI_HIDDEN = KIMI_K25_TEXT["vocab_size"], KIMI_K25_TEXT["hidden_size"]


@dataclass(frozen=True)
class DraftGeometry:
    """An EAGLE-3 draft layer's sizes (Llama layers) and its vocabularies."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    draft_vocab: int


#: Kimi-K2.5's draft layer: hidden 7168, 64 query and 64 KV heads of 128,
#: intermediate 18432, target vocabulary 163840, draft vocabulary 32000.
KIMI_K25_DRAFT = DraftGeometry(7168, 64, 64, 128, 18432, 163840, 32000)


#: The verifier architecture each draft layer is built for (``--draft-arch``).
DRAFT_VERIFIERS = {"llama": "LlamaForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM"}


def draft_layer(geo: DraftGeometry, arch: str, max_positions: int) -> Any:
    """The draft layer's config at ``geo``'s sizes: a Llama layer, or an MLA one
    (``deepseek_v3``) in Kimi-K2.5's proportions: nope and v ``head_dim``, rope
    half of it, q and kv LoRA ranks at Kimi-K2.5's ratio to the hidden size
    (1536 and 512 at 7168)."""
    from transformers import DeepseekV3Config, LlamaConfig

    from speculators_kimi.tiny_verifier import mla_text

    sizes = {
        "vocab_size": geo.vocab,
        "hidden_size": geo.hidden,
        "intermediate_size": geo.intermediate,
        "num_hidden_layers": 1,
        "num_attention_heads": geo.heads,
        "max_position_embeddings": max_positions,
    }
    if arch == "llama":
        return LlamaConfig(
            **sizes, num_key_value_heads=geo.kv_heads, head_dim=geo.head_dim
        )
    return DeepseekV3Config(
        **mla_text(
            **sizes,
            num_key_value_heads=geo.heads,
            qk_nope_head_dim=geo.head_dim,
            qk_rope_head_dim=geo.head_dim // 2,
            v_head_dim=geo.head_dim,
            q_lora_rank=max(4, round(geo.hidden * 1536 / 7168)),
            kv_lora_rank=max(4, round(geo.hidden * 512 / 7168)),
        )
    )


def one_layer_draft(
    geo: DraftGeometry,
    attn_impl: str,
    *,
    ttt_steps: int,
    device: torch.device,
    arch: str = "llama",
    verifier_architecture: str | None = None,
    max_positions: int = 2048,
) -> Any:
    """A one-layer EAGLE-3 draft of ``geo``'s sizes (``arch``: ``llama`` or
    ``deepseek_v3``) with verifier-owned weights filled in: the draft the
    training benchmarks step, built one way."""
    from speculators_kimi.tiny_verifier.draft import build_eagle3_draft

    layer = draft_layer(geo, arch, max_positions)
    layer._attn_implementation = attn_impl
    return build_eagle3_draft(
        layer,
        draft_vocab_size=geo.draft_vocab,
        ttt_steps=ttt_steps,
        verifier_architecture=verifier_architecture or DRAFT_VERIFIERS[arch],
        std=0.02,
        device=device,
    )


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


def export_and_vllm_check(
    ckpt: Path,
    out: Path,
    verifier: Path,
    hub_id: str,
    report: Path,
    keys: tuple[str, ...],
) -> dict[str, Any]:
    """Export ``ckpt`` to ``out`` (timed and sized), then run the
    ``speculators-kimi vllm-check`` command on it and keep ``keys`` of its JSON
    report (or its stderr's tail where it fails): the Kimi-size benchmarks' row."""
    from speculators_kimi.export import export_draft

    row: dict[str, Any] = {}
    t0 = time.perf_counter()
    export_draft(ckpt, out, verifier_id=hub_id, verifier=str(verifier), overwrite=True)
    row["export_seconds"] = round(time.perf_counter() - t0, 1)
    row["export_bytes"] = (out / "model.safetensors").stat().st_size
    cmd = [str(Path(sys.executable).parent / "speculators-kimi"), "vllm-check"]
    cmd += [str(out), "--checkpoint", str(ckpt), "--verifier", str(verifier)]
    cmd += ["--synthetic-aux-states", "--json", str(report)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        row["vllm_check_failed"] = proc.stderr[-3000:]
    else:
        check = json.loads(report.read_text())
        row["vllm_check"] = {key: check.get(key) for key in keys}
    return row
