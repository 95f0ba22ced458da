"""Peak memory per rank of `speculators train --sp-size N` against tokens.

    python benchmarks/sp_memory.py --json OUT                  # CPU, gloo
    python benchmarks/sp_memory.py --device cuda --json OUT    # one GPU

CPU (the default): for each degree (1, 2, 4) one ``torchrun --standalone
--nproc-per-node D`` of this script (gloo) trains a small Llama EAGLE-3 draft
(one layer, 4 heads of 8, eager attention, fp32, 3 TTT steps) through the
trainer's calls: ``sp_step_inputs`` splits the packed batch, the model is called
with the SP group (``sp_forward``: Ulysses all-to-all, masks per 1024-query
block, checkpointed), then ``backward``. Per rank and length it reports the
step's peak. At degree 1 it also runs upstream's path (what ``--sp-size 1``
runs: dense eager masks over the whole sequence) and builds upstream's dense
eager mask alone (the backend registry's ``build_mask`` and ``extend_mask``).

The mask part runs the unit's mask code (``_attend_block``, the inner attention
replaced by a probe that keeps nothing) at 64K and 128K tokens, where upstream's
dense mask needs tens of GB: one query block per TTT step, each at that step's
key length. Every block of a step has the same ``1024 x kv_len`` shape and is
freed (checkpointed) before the next, so the largest is the mask's peak.

Memory on CPU: the step's peak is ``VmHWM`` after ``/proc/self/clear_refs``
reset it at the step's start, minus ``VmRSS`` then (the resident set's growth
during the step: its tensors, gradients and temporaries; no file is mapped
during it). ``peak_rss_anon_bytes`` adds ``RssAnon`` at the start (model,
batch, interpreter). The workers run with ``MALLOC_MMAP_THRESHOLD_=65536`` so
glibc gives freed tensors back at once and the next step's growth is its own.

``--device cuda``: degree 1 on one GPU (NCCL), a Kimi-K2.5-size draft layer
(hidden 7168, 64 heads of 128, intermediate 18432, draft vocabulary 32000),
fp32 parameters, bf16 hidden states and autocast as the trainer runs on a GPU,
``sdpa`` inside the Ulysses wrapper, 3 and 7 TTT steps; memory is
``torch.cuda.max_memory_allocated`` above ``memory_allocated`` at the step's
start. An out-of-memory length is recorded as such.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import inspect
import json
import os
import subprocess
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench_common import (  # this directory (run as a script)
    DRAFT_VERIFIERS,
    KIMI_K25_DRAFT,
    DraftGeometry,
    cpu_model,
    one_layer_draft,
)

from speculators_kimi.cli_args import save_json_report

HERE = Path(__file__).resolve()


TINY = DraftGeometry(32, 4, 4, 8, 64, 512, 256)

CPU_DEGREES = (1, 2, 4)
CPU_LENGTHS = (1024, 2048, 4096)
MASK_LENGTHS = (65536, 131072)
GPU_LENGTHS = (8192, 16384, 32768, 65536)
DOCUMENT_TOKENS = 1024  # tokens per packed document


# ---------------------------------------------------------------------------
# Memory readings
# ---------------------------------------------------------------------------


def _status(field: str) -> int:
    from speculators_kimi.memory import status_bytes

    return status_bytes(field)


class PeakMeter:
    """The peak of one measured region, above its start (CPU: ``VmHWM`` reset by
    ``clear_refs``; CUDA: the caching allocator's counters)."""

    def __init__(self, device: Any) -> None:
        self.device = device

    def start(self) -> dict[str, int]:
        import torch

        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = int(torch.cuda.memory_allocated(self.device))
            return {"allocated_at_start_bytes": self.base}
        Path("/proc/self/clear_refs").write_text("5")
        self.base = _status("VmRSS")
        return {
            "rss_at_start_bytes": self.base,
            "rss_anon_at_start_bytes": _status("RssAnon"),
        }

    def peak(self) -> int:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            return int(torch.cuda.max_memory_allocated(self.device)) - self.base
        return _status("VmHWM") - self.base


# ---------------------------------------------------------------------------
# The batch
# ---------------------------------------------------------------------------


def host_batch(geo: DraftGeometry, seq_len: int, dtype: Any) -> dict[str, Any]:
    """A packed batch as the dataloader gives every rank: whole, on the host."""
    import torch

    gen = torch.Generator().manual_seed(seq_len)
    document_ids = (torch.arange(seq_len) // DOCUMENT_TOKENS).unsqueeze(0)
    positions = 1 + torch.arange(seq_len) % DOCUMENT_TOKENS
    return {
        "hidden_states": torch.randn(1, seq_len, 3 * geo.hidden, generator=gen)
        .to(dtype)
        .mul_(0.5),
        "input_ids": torch.randint(0, geo.vocab, (1, seq_len), generator=gen),
        "document_ids": document_ids,
        "position_ids": positions.unsqueeze(0),
        "loss_mask": torch.ones(1, seq_len, dtype=torch.bool),
        "verifier_last_hidden_states": torch.randn(
            1, seq_len, geo.hidden, generator=gen
        )
        .to(dtype)
        .mul_(0.5),
    }


def _nbytes(batch: dict[str, Any]) -> int:
    return sum(
        v.numel() * v.element_size() for v in batch.values() if hasattr(v, "numel")
    )


def train_step(model, batch, call_kwargs, *, sp: bool, device, autocast) -> float:
    """The trainer's step up to the backward: split, copy, forward, backward."""
    import contextlib

    import torch
    from speculators.models.eagle3.sequence_parallel import sp_step_inputs
    from speculators.train import distributed as train_dist

    rank_batch, kwargs = sp_step_inputs(batch, call_kwargs)
    if sp and "sp_group" not in kwargs:
        # Degree 1: the SP forward over a one-rank group (``--sp-size 1`` runs
        # upstream's forward instead; that is the "upstream" mode).
        kwargs["sp_group"] = train_dist.get_sp_group()
    on_device = {
        k: v.to(device) if isinstance(v, torch.Tensor) else v
        for k, v in rank_batch.items()
    }
    amp = (
        torch.autocast(device.type, dtype=autocast)
        if autocast is not None
        else contextlib.nullcontext()
    )
    with amp:
        _, loss, _ = model(**on_device, **kwargs)
    model.zero_grad(set_to_none=True)
    loss.backward()
    value = float(loss.detach())
    del loss, on_device, rank_batch
    model.zero_grad(set_to_none=True)
    return value


# ---------------------------------------------------------------------------
# Measurements (one rank)
# ---------------------------------------------------------------------------


def measure_step(model, geo, seq_len, ttt_steps, *, mode, device, dtypes) -> dict:
    from speculators.losses import resolve_loss_config

    param_dtype, batch_dtype, autocast = dtypes
    batch = host_batch(geo, seq_len, batch_dtype)
    call_kwargs = {
        "ttt_steps": ttt_steps,
        "ttt_step_loss_decay": 1.0,
        "loss_config": resolve_loss_config("kl_div", "eager"),
    }
    meter = PeakMeter(device)
    row: dict[str, Any] = {
        "mode": mode,
        "tokens": seq_len,
        "ttt_steps": ttt_steps,
        "host_batch_bytes": _nbytes(batch),
    }
    row.update(meter.start())
    t0 = time.perf_counter()
    try:
        row["loss"] = train_step(
            model, batch, call_kwargs, sp=mode == "sp", device=device, autocast=autocast
        )
    except Exception as exc:  # an out-of-memory length is a result, not a crash
        row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        if device.type != "cuda" or "out of memory" not in str(exc):
            traceback.print_exc()
        model.zero_grad(set_to_none=True)
    row["seconds"] = round(time.perf_counter() - t0, 2)
    row["step_peak_bytes"] = meter.peak()
    if "rss_anon_at_start_bytes" in row:
        row["peak_rss_anon_bytes"] = (
            row["rss_anon_at_start_bytes"] + row["step_peak_bytes"]
        )
    return row


def measure_sp_mask(model, seq_len: int, ttt_steps: int) -> list[dict]:
    """The unit's mask per attention call at ``seq_len``, one block per step."""
    import torch
    from speculators.models.attention_backends import get_backend
    from speculators.models.eagle3 import sequence_parallel as sp
    from speculators.train import distributed as train_dist

    state = sp._UlyssesState(
        group=train_dist.get_sp_group(),
        document_ids=(torch.arange(seq_len) // DOCUMENT_TOKENS),
        seq_len=seq_len,
        backend=get_backend("eager"),
    )
    module = model.layers[0].self_attn
    seen: dict[str, Any] = {}

    def probe(_module, query, _key, _value, mask, **_kwargs):
        seen["mask_shape"] = list(mask.shape)
        seen["mask_bytes"] = mask.numel() * mask.element_size()
        return query.transpose(1, 2), None

    rows = []
    query = torch.zeros(1, 1, sp.QUERY_BLOCK, 1)
    q_start = (seq_len // 2) // sp.QUERY_BLOCK * sp.QUERY_BLOCK
    bounds = (q_start, q_start + sp.QUERY_BLOCK)
    for step in range(ttt_steps):
        kv_len = (step + 1) * seq_len
        key = torch.zeros(1, 1, kv_len, 0)  # only its length is read
        meter = PeakMeter(torch.device("cpu"))
        row: dict[str, Any] = {"tokens": seq_len, "ttt_step": step, "kv_len": kv_len}
        row.update(meter.start())
        t0 = time.perf_counter()
        sp._attend_block(probe, module, state, None, bounds, query, key, key)
        row["seconds"] = round(time.perf_counter() - t0, 2)
        row["call_peak_bytes"] = meter.peak()
        row.update(seen)
        rows.append(row)
    return rows


def measure_dense_mask(seq_len: int, ttt_steps: int) -> dict:
    """Upstream's dense eager mask of every TTT step, built alone, its peak."""
    import torch
    from speculators.models.attention_backends import get_backend

    backend = get_backend("eager")
    doc_ids = torch.arange(seq_len) // DOCUMENT_TOKENS
    meter = PeakMeter(torch.device("cpu"))
    row: dict[str, Any] = {"tokens": seq_len, "ttt_steps": ttt_steps}
    row.update(meter.start())
    t0 = time.perf_counter()
    mask = backend.build_mask(doc_ids, seq_len, "cpu")
    for _ in range(ttt_steps - 1):
        mask = backend.extend_mask(mask, seq_len)
    row["seconds"] = round(time.perf_counter() - t0, 2)
    row["peak_bytes"] = meter.peak()
    row["last_mask_shape"] = list(mask.shape)
    row["last_mask_bytes"] = mask.numel() * mask.element_size()
    row["peak_bytes_per_token_pair"] = row["peak_bytes"] / seq_len**2
    return row


def worker(args: argparse.Namespace) -> int:
    """One torchrun rank: every measurement of its degree, written by rank 0."""
    import torch
    import torch.distributed as dist
    from speculators.train import distributed as train_dist

    world = int(os.environ["WORLD_SIZE"])
    train_dist.maybe_setup_distributed(sp_size=world)
    cuda = args.device == "cuda"
    device = (
        torch.device("cuda", train_dist.get_local_rank())
        if cuda
        else torch.device("cpu")
    )
    geo = KIMI_K25_DRAFT if cuda else TINY
    # The trainer's dtypes on a GPU; fp32 without autocast on CPU.
    dtypes = (
        (torch.float32, torch.bfloat16, torch.bfloat16)
        if cuda
        else (torch.float32, torch.float32, None)
    )
    model = one_layer_draft(
        geo,
        args.attn_impl,
        ttt_steps=max(args.ttt_steps),
        device=device,
        arch=args.draft_arch,
    )
    report: dict[str, Any] = {
        "device_name": torch.cuda.get_device_name(device) if cuda else cpu_model(),
        "world_size": world,
        "steps": [],
        "sp_mask": [],
        "dense_mask": [],
    }

    def save() -> None:
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, report["steps"])
        if dist.get_rank() == 0:
            out = {**report, "steps_by_rank": gathered}
            Path(args.part).write_text(json.dumps(out, indent=1) + "\n")

    # Warm-up (code paged in, allocator arenas made), not recorded.
    modes = ["sp"] + (["upstream"] if world == 1 and not cuda else [])
    for mode in modes:
        measure_step(
            model, geo, 256 * world, 2, mode=mode, device=device, dtypes=dtypes
        )
    started = time.monotonic()
    for steps in args.ttt_steps:
        for mode in modes:
            for seq_len in args.lengths:
                if args.deadline and time.monotonic() - started > args.deadline:
                    report["skipped_after_deadline"] = True
                    continue
                row = measure_step(
                    model, geo, seq_len, steps, mode=mode, device=device, dtypes=dtypes
                )
                row["rank"] = dist.get_rank()
                report["steps"].append(row)
                print(json.dumps(row), flush=True)
                save()
    if world == 1 and not cuda:
        for seq_len in args.lengths:
            report["dense_mask"].append(
                measure_dense_mask(seq_len, max(args.ttt_steps))
            )
            print(json.dumps(report["dense_mask"][-1]), flush=True)
        for seq_len in args.mask_lengths:
            rows = measure_sp_mask(model, seq_len, max(args.ttt_steps))
            report["sp_mask"].extend(rows)
            print(json.dumps(rows), flush=True)
        save()
    dist.destroy_process_group()
    return 0


# ---------------------------------------------------------------------------
# The launcher
# ---------------------------------------------------------------------------


def dense_mask_model(seq_len: int, ttt_steps: int) -> dict[str, Any]:
    """Upstream's dense eager mask at ``seq_len``, from its code's shapes.

    ``create_float_mask`` turns ``create_mask``'s boolean ``[1, 1, N, N]`` into
    an additive mask of its ``dtype`` (``s`` bytes); each later TTT step's
    ``extend_dense_mask_for_draft_tokens`` builds a boolean diagonal and an
    ``[N, N]`` block of that dtype and concatenates them onto the old mask: at
    the last step the old ``[N, (T - 1) N]``, the block, the diagonal and the new
    ``[N, T N]`` are alive together, ``(2 T s + 1) N^2`` bytes. Every rank builds
    it whole, whatever the degree.
    """
    import torch
    from speculators.models.attention import create_float_mask

    dtype = inspect.signature(create_float_mask).parameters["dtype"].default
    size = torch.empty((), dtype=dtype).element_size()
    pairs = seq_len * seq_len
    return {
        "tokens": seq_len,
        "ttt_steps": ttt_steps,
        "dtype": str(dtype),
        "last_mask_bytes": size * ttt_steps * pairs,
        "build_peak_bytes": (2 * ttt_steps * size + 1) * pairs,
        "build_peak_bytes_per_token_pair": 2 * ttt_steps * size + 1,
    }


#: One H200's memory (NVIDIA's figure, decimal bytes).
H200_BYTES = 141e9
#: Kimi-K2.5-size drafts (``kimi_size_export.py``, 2026-12-03): trainable and
#: frozen parameters, and issue 48's activation estimate per token at 3 and 7
#: TTT steps (upstream's code shapes at hidden 7168, draft vocabulary 32000).
KIMI_DRAFTS = {
    "llama": (961_594_368, 1_633_164_288, {3: 1.58e6, 7: 3.73e6}),
    "deepseek_v3 (MLA)": (666_793_984, 1_633_164_288, {3: 1.80e6, 7: 4.61e6}),
}


def h200_estimate(degrees: tuple[int, ...] = (1, 2, 4, 8)) -> dict[str, Any]:
    """Up to what length one H200 per rank trains a Kimi-K2.5 draft: an estimate.

    Per rank: fp32 weights, gradients and AdamW state (16 bytes per trainable
    parameter, 4 per frozen one, not sharded), plus the activations per token
    divided by the degree, plus what every rank holds whole: one query block's
    mask (``QUERY_BLOCK x T N`` booleans and sdpa's additive bf16 copy) and the
    ids, positions and loss mask (25 bytes a token). The CPU runs of both
    drafts (Llama and MLA, 1-4K tokens) show that split: a rank's peak is
    degree 1's over 2.00-2.01 at degree 2 and over 3.44-3.49 at degree 4, the
    shortfall from 4 being the query block's mask each rank builds whole.
    """
    rows = []
    for draft, (trainable, frozen, per_token) in KIMI_DRAFTS.items():
        static = 4 * (trainable + frozen) + 12 * trainable
        for steps, activations in per_token.items():
            whole = 1024 * steps * 3 + 25
            row: dict[str, Any] = {
                "draft": draft,
                "ttt_steps": steps,
                "static_bytes": static,
                "activation_bytes_per_token": activations,
                "whole_bytes_per_token_per_rank": whole,
            }
            for degree in degrees:
                tokens = (H200_BYTES - static) / (activations / degree + whole)
                step = 1024 * degree  # --total-seq-len must divide by the degree
                row[f"degree_{degree}_max_tokens"] = int(tokens // step * step)
            rows.append(row)
    return {
        "estimate": True,
        "measured_on_gpu": False,
        "h200_bytes": H200_BYTES,
        "assumptions": h200_estimate.__doc__,
        "rows": rows,
    }


def run_degree(args, degree: int, part: Path) -> dict[str, Any]:
    cores = os.cpu_count() or 1
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(max(1, cores // degree)),
        "MALLOC_MMAP_THRESHOLD_": "65536",
    }
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    cmd += [f"--nproc-per-node={degree}", str(HERE), "--worker", "--part", str(part)]
    cmd += ["--device", args.device, "--attn-impl", args.attn_impl]
    cmd += ["--draft-arch", args.draft_arch]
    cmd += [
        "--lengths",
        *map(str, args.lengths),
        "--ttt-steps",
        *map(str, args.ttt_steps),
    ]
    cmd += ["--mask-lengths", *map(str, args.mask_lengths)]
    if args.deadline is not None:
        cmd += ["--deadline", str(args.deadline)]
    print(f"degree {degree}: {' '.join(cmd[3:])}", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, text=True, capture_output=True, check=False)
    seconds = round(time.perf_counter() - t0, 1)
    got: dict[str, Any] = {
        "degree": degree,
        "returncode": proc.returncode,
        "seconds": seconds,
    }
    if proc.returncode:
        got["log_tail"] = (proc.stdout + proc.stderr)[-3000:]
        print(got["log_tail"], file=sys.stderr)
    if part.exists():
        got.update(json.loads(part.read_text()))
    return got


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Largest rank's step peak per (mode, degree, steps, tokens); fits."""
    table: dict[str, dict[str, int]] = {}
    for run in runs:
        for ranks in run.get("steps_by_rank") or []:
            for row in ranks or []:
                if "error" in row:
                    continue
                key = f"{row['mode']} degree {run['degree']} ttt {row['ttt_steps']}"
                cell = table.setdefault(key, {})
                tokens = str(row["tokens"])
                cell[tokens] = max(cell.get(tokens, 0), row["step_peak_bytes"])
    growth = {}
    for key, cell in table.items():
        tokens = sorted(cell, key=int)
        if len(tokens) >= 2:
            a, b = tokens[-2], tokens[-1]
            growth[key] = {
                "tokens": [int(a), int(b)],
                "peak_ratio": round(cell[b] / max(cell[a], 1), 3),
                "token_ratio": int(b) / int(a),
                "bytes_per_added_token": round((cell[b] - cell[a]) / (int(b) - int(a))),
            }
    by_degree: dict[str, dict[str, float]] = {}
    for key, cell in table.items():
        mode, _, degree, _, steps = key.split()
        one = table.get(f"{mode} degree 1 ttt {steps}", {})
        if mode == "sp" and degree != "1":
            by_degree[key] = {
                t: round(one[t] / cell[t], 3) for t in cell if one.get(t) and cell[t]
            }
    return {
        "step_peak_bytes_max_over_ranks": table,
        "growth_between_two_longest": growth,
        "degree_1_peak_over_this_degree": by_degree,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a CPU smoke run of the plumbing (one short length; the device "
        "script's rehearsal), never a figure",
    )
    parser.add_argument("--degrees", type=int, nargs="+", default=None)
    parser.add_argument("--lengths", type=int, nargs="+", default=None)
    parser.add_argument("--ttt-steps", type=int, nargs="+", default=None)
    parser.add_argument("--mask-lengths", type=int, nargs="*", default=None)
    parser.add_argument("--attn-impl", default=None, help="inner attention")
    parser.add_argument(
        "--draft-arch",
        choices=tuple(DRAFT_VERIFIERS),
        default="llama",
        help="the draft layer: Llama or MLA (as --draft-arch in training)",
    )
    parser.add_argument(
        "--deadline", type=float, default=None, help="seconds; later lengths skipped"
    )
    parser.add_argument(
        "--estimate",
        action="store_true",
        help="print the H200 length estimate (no measurement) and exit",
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/sp_memory"))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--part", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.device, args.lengths, args.mask_lengths = "cpu", [256], []
    cuda = args.device == "cuda"
    args.lengths = args.lengths or list(GPU_LENGTHS if cuda else CPU_LENGTHS)
    args.ttt_steps = args.ttt_steps or ([3, 7] if cuda else [3])
    args.mask_lengths = (
        args.mask_lengths
        if args.mask_lengths is not None
        else ([] if cuda else list(MASK_LENGTHS))
    )
    args.attn_impl = args.attn_impl or ("sdpa" if cuda else "eager")
    if args.estimate:
        save_json_report(h200_estimate(), args.json)
        return 0
    if args.worker:
        return worker(args)
    degrees = args.degrees or ([1] if cuda else list(CPU_DEGREES))

    import torch

    args.work.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "benchmark": "sp_memory",
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": (
            "cuda: one GPU (its name: runs[].device_name)"
            if cuda
            else f"cpu: {cpu_model()}, {os.cpu_count()} cores shared by every rank"
        ),
        "torch": torch.__version__,
        "command": " ".join(["python", *sys.argv]),
        "geometry": asdict(KIMI_K25_DRAFT if cuda else TINY),
        "draft_arch": args.draft_arch,
        "attn_impl": args.attn_impl,
        "dtypes": (
            "fp32 parameters, bf16 hidden states and autocast"
            if cuda
            else "fp32, no autocast"
        ),
        "document_tokens": DOCUMENT_TOKENS,
        "memory": (
            "torch.cuda.max_memory_allocated above memory_allocated at the start"
            if cuda
            else "VmHWM reset by /proc/self/clear_refs at the start, minus VmRSS "
            "then; workers run with MALLOC_MMAP_THRESHOLD_=65536"
        ),
        "step": "sp_step_inputs, the model's forward (sp_forward under the SP "
        "group; upstream's forward in mode 'upstream'), backward",
        "runs": [],
    }
    for degree in degrees:
        part = args.work / f"degree{degree}-{args.device}.json"
        part.unlink(missing_ok=True)
        result["runs"].append(run_degree(args, degree, part))
        result["summary"] = summarize(result["runs"])
        save_json_report(result, args.json, show=False)
    if not cuda:
        result["dense_mask_from_shapes"] = [
            dense_mask_model(n, max(args.ttt_steps)) for n in args.mask_lengths
        ]
        sp_rows = [r for run in result["runs"] for r in run.get("sp_mask") or []]
        measured = [r for run in result["runs"] for r in run.get("dense_mask") or []]
        result["dense_mask_measured_bytes_per_token_pair"] = {
            str(r["tokens"]): r["peak_bytes_per_token_pair"] for r in measured
        }
        for dense in result["dense_mask_from_shapes"]:
            mine = [
                r["call_peak_bytes"] for r in sp_rows if r["tokens"] == dense["tokens"]
            ]
            if mine:
                dense["sp_mask_call_peak_bytes"] = max(mine)
                for part in ("last_mask", "build_peak"):
                    dense[f"dense_{part}_over_sp_call_peak"] = round(
                        dense[f"{part}_bytes"] / max(mine), 1
                    )
    save_json_report(result, args.json)
    return int(any(run["returncode"] for run in result["runs"]))


if __name__ == "__main__":
    raise SystemExit(main())
