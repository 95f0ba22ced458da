"""Whole-draft training step: the `triton` backend vs upstream's default.

One EAGLE-3 draft layer with Kimi-K2.5's draft geometry (hidden 7168, 64 query and
64 KV heads of 128, target vocabulary 163840, draft vocabulary 32000), a packed
batch of N = 8192 tokens, 3 TTT steps, stepped as `speculators train` steps it on
one GPU (``Trainer.train_epoch``): fp32 parameters, the forward (upstream's
``torch.compile``d ``Eagle3DraftModel.forward``) and loss under bf16 autocast with
bf16 hidden states, ``zero_grad``, backward, ``clip_grad_norm_(1.0)`` and an AdamW
step. Reports, per backend, the median step time, tokens/s (N packed tokens per
step) and the peak memory of the timed steps (``max_memory_allocated``: parameters,
gradients, AdamW state and activations), and the ratio to
`simple_flex_attention`.

The backends run one after the other, `triton` first, each in a clean state (the
other's model, optimizer and compiled graphs freed), so each peak is its own; the
first step (compilation) is timed apart. The JSON is written after each backend,
so a run cut by its time limit keeps the backend under test.

    python benchmarks/draft_train_step.py --out result.json            # GPU
    TRITON_INTERPRET=1 python benchmarks/draft_train_step.py --quick   # CPU smoke

`--quick` shrinks everything, keeps fp32 without autocast and compares against
`sdpa` (flex attention has no backward on CPU); its timings are interpreter
timings, not performance figures.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from bench_common import (  # this directory (run as a script)
    KIMI_K25_DRAFT,
    DraftGeometry,
    device_name,
    one_layer_draft,
)

from speculators_kimi.cli_args import save_json_report


@dataclass(frozen=True)
class Geometry(DraftGeometry):
    """The draft layer and the packed batch it is stepped on."""

    seq_len: int
    documents: int
    ttt_steps: int


KIMI_K25 = Geometry(**asdict(KIMI_K25_DRAFT), seq_len=8192, documents=1, ttt_steps=3)
QUICK = Geometry(64, 4, 4, 16, 128, 512, 256, 96, 3, 3)


def build_draft(geo: Geometry, attn_impl: str, device: torch.device, dtype):
    """A one-layer EAGLE-3 draft with verifier-owned weights filled in."""
    model = one_layer_draft(
        geo,
        attn_impl,
        ttt_steps=geo.ttt_steps,
        verifier_architecture="KimiK25ForConditionalGeneration",
        device=device,
        max_positions=max(geo.seq_len, 2048),
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


def train_step(
    model: Any,
    optimizer: torch.optim.Optimizer,
    batch: dict[str, Any],
    geo: Geometry,
    autocast: torch.dtype | None,
) -> float:
    """One step as the trainer takes it; returns the loss (before the update)."""
    from speculators.losses import resolve_loss_config

    device = batch["input_ids"].device
    amp = (
        torch.autocast(device.type, dtype=autocast)
        if autocast is not None
        else contextlib.nullcontext()
    )
    with amp:
        _, loss, _ = model(
            **batch,
            ttt_steps=geo.ttt_steps,
            loss_config=resolve_loss_config("kl_div", "eager"),
        )
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return float(loss.detach())


def free(device: torch.device) -> int | None:
    """Drop what a previous backend left (compiled graphs, cached blocks); the
    bytes still allocated (the batch)."""
    gc.collect()
    if device.type != "cuda":
        return None
    torch._dynamo.reset()
    gc.collect()
    torch.cuda.empty_cache()
    return int(torch.cuda.memory_allocated(device))


def measure(
    impl: str,
    geo: Geometry,
    batch: dict[str, Any],
    rounds: int,
    param_dtype: torch.dtype,
    autocast: torch.dtype | None,
) -> dict[str, Any]:
    """Build one backend's draft and optimizer, take a first (compiling) step,
    then time ``rounds`` steps with their peak memory."""
    device = batch["input_ids"].device
    resident = free(device)
    started = time.perf_counter()
    model = build_draft(geo, impl, device, param_dtype)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4, weight_decay=0.01)
    synchronize(device)
    build_s = time.perf_counter() - started
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    started = time.perf_counter()
    loss = train_step(model, optimizer, batch, geo, autocast)  # compiles
    synchronize(device)
    first_s = time.perf_counter() - started
    first_peak = None
    if device.type == "cuda":
        first_peak = int(torch.cuda.max_memory_allocated(device))
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        train_step(model, optimizer, batch, geo, autocast)
        synchronize(device)
        times.append(time.perf_counter() - started)
    median = statistics.median(times)
    out: dict[str, Any] = {
        "median_step_s": median,
        "step_s": times,
        "tokens_per_s": geo.seq_len / median,
        "first_step_s": first_s,
        "build_s": build_s,
        "trainable_parameters": sum(p.numel() for p in trainable),
        "loss": loss,
        "peak_memory_bytes": None,
        "peak_reserved_bytes": None,
        "first_step_peak_bytes": first_peak,
        "resident_before_bytes": resident,
    }
    if device.type == "cuda":
        out["peak_memory_bytes"] = int(torch.cuda.max_memory_allocated(device))
        out["peak_reserved_bytes"] = int(torch.cuda.max_memory_reserved(device))
    del model, optimizer, trainable
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny CPU smoke run")
    parser.add_argument("--rounds", type=int, default=3, help="timed steps each")
    parser.add_argument(
        "--impls", nargs="+", default=None, help="default: triton, the baseline"
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    cuda = torch.cuda.is_available() and not args.quick
    device = torch.device("cuda" if cuda else "cpu")
    geo = KIMI_K25 if cuda else QUICK
    # the trainer's dtypes on a GPU: fp32 parameters, bf16 hidden states and autocast
    param_dtype = torch.float32
    autocast = torch.bfloat16 if cuda else None
    batch_dtype = torch.bfloat16 if cuda else torch.float32
    baseline = "simple_flex_attention" if cuda else "sdpa"
    # Ours first: a step cut by its time limit still measured the backend under
    # test (each backend's result is saved as soon as it is measured).
    impls = args.impls or ["triton", baseline]
    batch = make_batch(geo, device, batch_dtype)

    result: dict[str, Any] = {
        "benchmark": "draft_train_step",
        "device": device_name(device),
        "interpreter_timings": not cuda,
        "torch": torch.__version__,
        "parameter_dtype": str(param_dtype),
        "autocast": str(autocast),
        "hidden_states_dtype": str(batch_dtype),
        "step": "trainer's: forward+loss (autocast), zero_grad, backward, "
        "clip_grad_norm_(1.0), AdamW step",
        "geometry": asdict(geo),
        "tokens_per_step": geo.seq_len,
        "baseline": baseline,
        "rounds": args.rounds,
        "order": "one backend after the other, each from a clean state",
        "results": {},
    }
    failed = 0
    for impl in impls:
        print(
            f"{impl}: building, first step (compiles), {args.rounds} timed steps",
            flush=True,
        )
        try:
            got = measure(impl, geo, batch, args.rounds, param_dtype, autocast)
        except Exception as exc:  # recorded, never a number
            traceback.print_exc()
            got = {"error": f"{type(exc).__name__}: {exc}"[:500]}
            failed += 1
        result["results"][impl] = got
        if "median_step_s" in got:
            print(
                f"  {got['median_step_s']:.3f} s/step, "
                f"{got['tokens_per_s']:.0f} tokens/s, peak "
                f"{got['peak_memory_bytes']} B, first step {got['first_step_s']:.1f} s",
                flush=True,
            )
        save_json_report(result, args.out, show=False)
    base = result["results"].get(baseline, {})
    ours = result["results"].get("triton", {})
    if "median_step_s" in base and "median_step_s" in ours:
        result["speedup_vs_baseline"] = base["median_step_s"] / ours["median_step_s"]
        if base.get("peak_memory_bytes") and ours.get("peak_memory_bytes"):
            result["peak_memory_ratio_vs_baseline"] = (
                ours["peak_memory_bytes"] / base["peak_memory_bytes"]
            )
    save_json_report(result, args.out)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
