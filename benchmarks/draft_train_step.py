"""Whole-draft training step: the `triton` backend vs upstream's default.

One EAGLE-3 draft layer with Kimi-K2.5's draft geometry (hidden 7168, 64 query and
64 KV heads of 128, target vocabulary 163840, draft vocabulary 32000), a packed
batch of N = 8192 tokens, 3 TTT steps: forward, loss and backward, as the trainer
runs them. Reports the median step time and the peak memory of each backend, run
alternately in one process, and the ratio to `simple_flex_attention`.

    python benchmarks/draft_train_step.py --out result.json            # GPU
    TRITON_INTERPRET=1 python benchmarks/draft_train_step.py --quick   # CPU smoke

`--quick` shrinks everything and compares against `sdpa` (flex attention has no
backward on CPU); its timings are interpreter timings, not performance figures.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from bench_common import device_name  # this directory (run as a script)

from speculators_kimi.cli_args import save_json_report


@dataclass(frozen=True)
class Geometry:
    """Draft layer and batch sizes."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    draft_vocab: int
    seq_len: int
    documents: int
    ttt_steps: int


KIMI_K25 = Geometry(7168, 64, 64, 128, 18432, 163840, 32000, 8192, 1, 3)
QUICK = Geometry(64, 4, 4, 16, 128, 512, 256, 96, 3, 3)


def build_draft(geo: Geometry, attn_impl: str, device: torch.device, dtype):
    """A one-layer EAGLE-3 draft with verifier-owned weights filled in."""
    from transformers import LlamaConfig

    from speculators_kimi.tiny_verifier.draft import build_eagle3_draft

    layer = LlamaConfig(
        vocab_size=geo.vocab,
        hidden_size=geo.hidden,
        intermediate_size=geo.intermediate,
        num_hidden_layers=1,
        num_attention_heads=geo.heads,
        num_key_value_heads=geo.kv_heads,
        head_dim=geo.head_dim,
        max_position_embeddings=max(geo.seq_len, 2048),
    )
    layer._attn_implementation = attn_impl
    model = build_eagle3_draft(
        layer,
        draft_vocab_size=geo.draft_vocab,
        ttt_steps=geo.ttt_steps,
        verifier_architecture="KimiK25ForConditionalGeneration",
        std=0.02,
        device=device,
    )
    return model.to(device=device, dtype=dtype)


def make_batch(geo: Geometry, device: torch.device, dtype) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(1)
    doc_len = geo.seq_len // geo.documents
    ids = torch.arange(geo.seq_len) // max(doc_len, 1)
    document_ids = ids.clamp(max=geo.documents - 1).unsqueeze(0)
    return {
        "hidden_states": torch.randn(1, geo.seq_len, 3 * geo.hidden, generator=gen)
        .to(device, dtype)
        .mul_(0.5),
        "input_ids": torch.randint(0, geo.vocab, (1, geo.seq_len), generator=gen).to(
            device
        ),
        "document_ids": document_ids.to(device),
        "loss_mask": torch.ones(1, geo.seq_len, dtype=torch.bool, device=device),
        "verifier_last_hidden_states": torch.randn(
            1, geo.seq_len, geo.hidden, generator=gen
        )
        .to(device, dtype)
        .mul_(0.5),
    }


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def step(model, batch: dict[str, Any], geo: Geometry) -> float:
    """One training step (forward, loss, backward); returns the loss."""
    from speculators.losses import resolve_loss_config

    model.zero_grad(set_to_none=True)
    _, loss, _ = model(
        **batch,
        ttt_steps=geo.ttt_steps,
        loss_config=resolve_loss_config("kl_div", "eager"),
    )
    loss.backward()
    return float(loss.detach())


def measure(model, batch, geo: Geometry, device: torch.device) -> dict[str, Any]:
    """Time one step after a warm-up; peak memory on CUDA."""
    step(model, batch, geo)  # warm-up (compilation, autotune, caches)
    synchronize(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    loss = step(model, batch, geo)
    synchronize(device)
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    return {"seconds": seconds, "peak_bytes": peak, "loss": loss}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny CPU smoke run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    cuda = torch.cuda.is_available() and not args.quick
    device = torch.device("cuda" if cuda else "cpu")
    geo = KIMI_K25 if cuda else QUICK
    dtype = torch.bfloat16 if cuda else torch.float32
    baseline = "simple_flex_attention" if cuda else "sdpa"
    impls = [baseline, "triton"]
    models = {impl: build_draft(geo, impl, device, dtype) for impl in impls}
    batch = make_batch(geo, device, dtype)

    runs: dict[str, list[dict[str, Any]]] = {impl: [] for impl in impls}
    for _ in range(args.rounds):  # alternate, so drift hits both alike
        for impl in impls:
            runs[impl].append(measure(models[impl], batch, geo, device))

    result: dict[str, Any] = {
        "benchmark": "draft_train_step",
        "device": device_name(device),
        "interpreter_timings": not cuda,
        "torch": torch.__version__,
        "dtype": str(dtype),
        "geometry": asdict(geo),
        "baseline": baseline,
        "rounds": args.rounds,
        "results": {},
    }
    for impl in impls:
        times = [r["seconds"] for r in runs[impl]]
        peaks = [r["peak_bytes"] for r in runs[impl] if r["peak_bytes"] is not None]
        result["results"][impl] = {
            "median_step_s": statistics.median(times),
            "step_s": times,
            "peak_memory_bytes": max(peaks) if peaks else None,
            "loss": runs[impl][-1]["loss"],
        }
    base = result["results"][baseline]["median_step_s"]
    ours = result["results"]["triton"]["median_step_s"]
    result["speedup_vs_baseline"] = base / ours
    save_json_report(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
