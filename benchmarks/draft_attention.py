#!/usr/bin/env python
"""Draft-head TTT attention: our Triton kernel vs flex attention vs sdpa.

Baselines are built exactly as upstream's EAGLE-3 model builds them:

- ``flex``: ``create_block_mask`` of ``create_combined_mask_mod`` and one
  ``extend_mask_for_draft_tokens`` per TTT step, ``flex_attention`` compiled on CUDA.
- ``sdpa``: the dense boolean mask of ``create_mask`` extended with
  ``extend_dense_mask_for_draft_tokens`` per step, ``scaled_dot_product_attention``.
- ``triton``: ``speculators_kimi.kernels.draft_attention`` with ``document_layout``.

Head dims are ``--dims QK/V``: ``128/128`` for the Llama-style draft, ``192/128`` for
the MLA draft (``--draft-arch deepseek_v3``: qk_nope 128 + qk_rope 64, v 128), all
three impls on the same inputs.

Per configuration it times each TTT step (attention with ``t+1`` key blocks) and the
whole loop (all steps, k/v growing as with the ``DynamicCache``), forward and
forward+backward; reports useful TFLOP/s (block 0 forward
``2 Hq (d_qk + d_v) sum L(L+1)/2`` plus ``2 Hq (d_qk + d_v) N`` per diagonal block,
backward 2.5x), GB/s of compulsory traffic,
peak memory and the ratio to flex. Impls run alternately; medians are reported.

On CUDA: ``triton.testing.do_bench`` (CUDA events, warm-up). ``--quick`` runs tiny
sizes and also works on CPU under ``TRITON_INTERPRET=1`` (timings are then of the
interpreter, meaningless as performance, and flex backward is skipped: it has none on
CPU). Failures (OOM, unsupported) are recorded as errors, never as numbers.

    python benchmarks/draft_attention.py --out benchmarks/results/draft_attention.json
    python benchmarks/draft_attention.py --n 8192 --docs 1 16 --heads 64x64 \
        --dims 128/128 192/128 --rounds 1 \
        --out /tmp/b.json          # a subset that fits a short device lease
    TRITON_INTERPRET=1 python benchmarks/draft_attention.py --quick --out /tmp/b.json
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench_common import kernel_report, timing_method  # noqa: E402  (this directory)

from speculators_kimi.cli_args import save_json_report  # noqa: E402
from speculators_kimi.kernels import document_layout, draft_attention  # noqa: E402

IMPLS = ("triton", "flex", "sdpa")
#: One TTT step's attention: (q, k, v) -> output.
Attention = Callable[..., torch.Tensor]


def make_document_ids(n: int, num_docs: int, device: torch.device) -> torch.Tensor:
    ids = torch.arange(n, device=device) // math.ceil(n / num_docs)
    return ids.to(torch.long)


def doc_lengths(document_ids: torch.Tensor) -> list[int]:
    ids = document_ids[document_ids >= 0]
    _, counts = torch.unique_consecutive(ids, return_counts=True)
    return [int(c) for c in counts.tolist()]


def useful_flops(
    lengths: list[int], n: int, hq: int, d_qk: int, d_v: int, blocks: int
) -> tuple[float, float]:
    """Forward and backward FLOPs of the allowed pairs: q.k (d_qk) and p.v (d_v)."""
    pairs = sum(ln * (ln + 1) / 2 for ln in lengths) + n * (blocks - 1)
    fwd = 2.0 * hq * (d_qk + d_v) * pairs
    return fwd, 2.5 * fwd


def min_bytes(n: int, hq: int, hkv: int, d_qk: int, d_v: int, blocks: int, elem: int):
    """Compulsory traffic, forward and backward."""
    q, o = hq * n * d_qk * elem, hq * n * d_v * elem
    k, v = hkv * blocks * n * d_qk * elem, hkv * blocks * n * d_v * elem
    fwd = q + k + v + o
    bwd = 2 * (q + k + v) + 2 * o  # read q, k, v, o, dO; write dq, dk, dv
    return fwd, bwd


class Timer:
    def __init__(self, device: torch.device, warmup: int, rep: int):
        self.device = device
        self.warmup = warmup
        self.rep = rep
        self.cpu_reps = 1

    def __call__(self, fn: Callable[[], Any]) -> float:
        """Median milliseconds of ``fn``."""
        if self.device.type == "cuda":
            import triton.testing

            return float(
                triton.testing.do_bench(
                    fn, warmup=self.warmup, rep=self.rep, return_mode="median"
                )
            )
        fn()  # warm-up (JIT, caches)
        times = []
        for _ in range(self.cpu_reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)


def peak_memory(fn: Callable[[], Any], device: torch.device) -> int | None:
    if device.type != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated() - base)


_COMPILED_FLEX: Callable[..., Any] | None = None


def _compiled_flex() -> Callable[..., Any]:
    """One compiled flex_attention for the run; every (shape, step) is a static
    specialization, so lift dynamo's recompile limit above the number of shapes."""
    global _COMPILED_FLEX
    if _COMPILED_FLEX is None:
        import torch._dynamo
        from torch.nn.attention.flex_attention import flex_attention

        for name in (
            "cache_size_limit",
            "recompile_limit",
            "accumulated_cache_size_limit",
        ):
            if hasattr(torch._dynamo.config, name):
                setattr(torch._dynamo.config, name, 4096)
        _COMPILED_FLEX = torch.compile(flex_attention, dynamic=False)
    return _COMPILED_FLEX


def _synced_ms(t0: float, device: torch.device) -> float:
    """Milliseconds since ``t0``, once the device has finished its queued work."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


@dataclass(frozen=True)
class MaskCase:
    """The packed sequence every attention builds its mask for."""

    document_ids: torch.Tensor
    n: int
    steps: int
    device: torch.device
    gqa: bool


def _triton_impl(case: MaskCase, info: dict[str, Any]) -> list[Attention]:
    t0 = time.perf_counter()
    layout = document_layout(case.document_ids)
    info["triton_mask_ms"] = _synced_ms(t0, case.device)

    def tri(q, k, v):
        return draft_attention(q, k, v, case.document_ids, layout=layout)

    return [tri] * case.steps


def _flex_impl(case: MaskCase, info: dict[str, Any]) -> list[Attention]:
    from speculators.models.eagle3.attention import (
        create_combined_mask_mod,
        extend_mask_for_draft_tokens,
    )
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    flex_fn: Callable[..., Any] = flex_attention
    if case.device.type == "cuda":
        flex_fn = _compiled_flex()
    n = case.n
    t0 = time.perf_counter()
    mask = create_block_mask(
        create_combined_mask_mod(case.document_ids, n),
        B=None,
        H=None,
        Q_LEN=n,
        KV_LEN=n,
        device=str(case.device),
    )
    masks = [mask]
    for _ in range(case.steps - 1):
        masks.append(extend_mask_for_draft_tokens(masks[-1]))
    info["flex_mask_ms"] = _synced_ms(t0, case.device)

    def make_flex(bm):
        def f(q, k, v):
            return flex_fn(q, k, v, block_mask=bm, enable_gqa=case.gqa)

        return f

    return [make_flex(m) for m in masks]


def _sdpa_impl(case: MaskCase, info: dict[str, Any]) -> list[Attention]:
    from speculators.models.eagle3.attention import (
        create_combined_mask_mod,
        extend_dense_mask_for_draft_tokens,
    )
    from torch.nn.attention.flex_attention import create_mask

    n = case.n
    t0 = time.perf_counter()
    dense = create_mask(
        create_combined_mask_mod(case.document_ids, n), None, None, n, n, case.device
    )
    dmasks = [dense]
    for _ in range(case.steps - 1):
        dmasks.append(extend_dense_mask_for_draft_tokens(dmasks[-1], n))
    info["sdpa_mask_ms"] = _synced_ms(t0, case.device)

    def make_sdpa(m):
        def f(q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=m, enable_gqa=case.gqa
            )

        return f

    return [make_sdpa(m) for m in dmasks]


def build_impls(
    document_ids: torch.Tensor,
    n: int,
    steps: int,
    device: torch.device,
    gqa: bool,
    impls: tuple[str, ...],
) -> tuple[dict[str, list[Attention]], dict[str, Any]]:
    """Per impl, one attention callable per step ``t`` taking (q, k, v); plus the
    mask-build times (ms) or errors."""
    case = MaskCase(document_ids, n, steps, device, gqa)
    out: dict[str, list[Attention]] = {}
    info: dict[str, Any] = {}
    if "triton" in impls:
        out["triton"] = _triton_impl(case, info)
    for name, build in (("flex", _flex_impl), ("sdpa", _sdpa_impl)):
        if name not in impls:
            continue
        try:
            out[name] = build(case, info)
        except Exception as exc:  # recorded, not fabricated
            info[f"{name}_error"] = f"{type(exc).__name__}: {exc}"
    return out, info


@dataclass
class Inputs:
    """One configuration's random q, k, v and output gradient per TTT step, and
    each step's keys and values concatenated over the steps so far."""

    qs: list[torch.Tensor]
    ks: list[torch.Tensor]
    vs: list[torch.Tensor]
    dos: list[torch.Tensor]
    kcat: list[torch.Tensor] = field(init=False)
    vcat: list[torch.Tensor] = field(init=False)

    def __post_init__(self) -> None:
        steps = range(len(self.qs))
        self.kcat = [torch.cat(self.ks[: t + 1], dim=2) for t in steps]
        self.vcat = [torch.cat(self.vs[: t + 1], dim=2) for t in steps]


def make_inputs(cfg: dict[str, Any], device: torch.device) -> Inputs:
    n, steps = cfg["n"], cfg["steps"]
    hq, hkv, d, dv = cfg["hq"], cfg["hkv"], cfg["d"], cfg["dv"]
    dtype = getattr(torch, cfg["dtype"])
    g = torch.Generator(device=device).manual_seed(0)

    def rnd(*shape):
        x = torch.randn(*shape, generator=g, device=device, dtype=torch.float32)
        return (0.5 * x).to(dtype)

    qs = [rnd(1, hq, n, d) for _ in range(steps)]
    ks = [rnd(1, hkv, n, d) for _ in range(steps)]
    vs = [rnd(1, hkv, n, dv) for _ in range(steps)]
    dos = [rnd(1, hq, n, dv) for _ in range(steps)]
    return Inputs(qs, ks, vs, dos)


def step_fn(
    f: Callable[..., torch.Tensor], inputs: Inputs, t: int, backward: bool
) -> Callable[[], Any]:
    """TTT step ``t`` alone: attention over its ``t + 1`` key blocks."""
    q = inputs.qs[t].detach().requires_grad_(backward)
    k = inputs.kcat[t].detach().requires_grad_(backward)
    v = inputs.vcat[t].detach().requires_grad_(backward)

    def run():
        o = f(q, k, v)
        if backward:
            q.grad = k.grad = v.grad = None
            o.backward(inputs.dos[t])
        return o

    return run


def loop_fn(fs: list[Attention], inputs: Inputs, backward: bool) -> Callable[[], Any]:
    """Every TTT step in turn, keys and values growing as in the DynamicCache."""
    qq = [x.detach().requires_grad_(backward) for x in inputs.qs]
    kk = [x.detach().requires_grad_(backward) for x in inputs.ks]
    vv = [x.detach().requires_grad_(backward) for x in inputs.vs]

    def run():
        total = None
        for t, f in enumerate(fs):
            k = torch.cat(kk[: t + 1], dim=2)
            v = torch.cat(vv[: t + 1], dim=2)
            o = f(qq[t], k, v)
            term = (o * inputs.dos[t]).sum() if backward else o
            total = term if (total is None or not backward) else total + term
        if backward:
            for x in (*qq, *kk, *vv):
                x.grad = None
            total.backward()

    return run


def bench(
    base: dict[str, Any],
    impl: str,
    kind: str,
    step: int | None,
    fn: Callable[[], Any],
    timer: Callable[[Callable[[], Any]], float],
    device: torch.device,
) -> dict[str, Any]:
    """One timing and peak memory of ``fn``, or the error it raised."""
    rec: dict[str, Any] = dict(base, impl=impl, kind=kind, step=step)
    try:
        rec["ms"] = timer(fn)
        rec["peak_mem_bytes"] = peak_memory(fn, device)
    except Exception as exc:
        rec["error"] = f"{type(exc).__name__}: {exc}"[:500]
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rec


def add_throughput(
    rec: dict[str, Any], cfg: dict[str, Any], lengths: list[int], t: int | None
) -> None:
    """Useful TFLOP(/s) and GB/s of compulsory traffic for a timed record (one
    step ``t``, or the whole loop when ``t`` is None)."""
    n, hq, hkv, d, dv = cfg["n"], cfg["hq"], cfg["hkv"], cfg["d"], cfg["dv"]
    elem = torch.tensor([], dtype=getattr(torch, cfg["dtype"])).element_size()
    step_range = range(cfg["steps"]) if t is None else [t]
    fl = [useful_flops(lengths, n, hq, d, dv, s + 1) for s in step_range]
    by = [min_bytes(n, hq, hkv, d, dv, s + 1, elem) for s in step_range]
    flops = sum(f[0] for f in fl)
    nbytes = sum(b[0] for b in by)
    if "bwd" in rec["kind"]:
        flops += sum(f[1] for f in fl)
        nbytes += sum(b[1] for b in by)
    rec["useful_tflops"] = flops / 1e12
    rec["tflop_per_s"] = flops / (rec["ms"] * 1e-3) / 1e12
    rec["gb_per_s"] = nbytes / (rec["ms"] * 1e-3) / 1e9


def check_vs_baselines(
    fns: dict[str, list[Attention]], inputs: Inputs
) -> dict[str, Any]:
    """Our kernel's largest difference from each baseline, at the last step."""
    check: dict[str, Any] = {}
    if "triton" not in fns:
        return check
    t = len(inputs.qs) - 1
    args = (inputs.qs[t], inputs.kcat[t], inputs.vcat[t])
    with torch.no_grad():
        ours = fns["triton"][t](*args).float()
        for other in ("sdpa", "flex"):
            if other not in fns:
                continue
            try:
                ref = fns[other][t](*args).float()
                check[f"max_abs_diff_vs_{other}"] = float((ours - ref).abs().max())
            except Exception as exc:
                check[f"{other}_error"] = f"{type(exc).__name__}: {exc}"[:300]
    return check


def run_config(cfg: dict[str, Any], args: argparse.Namespace, device, timer):
    n, steps = cfg["n"], cfg["steps"]
    document_ids = make_document_ids(n, cfg["docs"], device)
    lengths = doc_lengths(document_ids)
    fns, info = build_impls(
        document_ids, n, steps, device, cfg["hq"] != cfg["hkv"], args.impls
    )
    inputs = make_inputs(cfg, device)
    base = {k: cfg[k] for k in ("n", "docs", "steps", "hq", "hkv", "d", "dv", "dtype")}
    tasks: list[tuple[str, str, int | None]] = []
    for kind in ("fwd", "fwd_bwd"):
        tasks += [(kind, "step", t) for t in range(steps)]
        tasks.append((kind, "loop", None))

    impls = [i for i in args.impls if i in fns]
    medians: dict[tuple, list[dict[str, Any]]] = {}
    for _ in range(args.rounds):  # alternate impls, then take medians
        for kind, what, t in tasks:
            for impl in impls:
                backward = kind == "fwd_bwd"
                if backward and impl == "flex" and device.type != "cuda":
                    continue  # flex attention has no backward on CPU
                if what == "step":
                    assert t is not None
                    fn = step_fn(fns[impl][t], inputs, t, backward)
                else:
                    fn = loop_fn(fns[impl], inputs, backward)
                label = kind if what == "step" else f"loop_{kind}"
                medians.setdefault((impl, label, t), []).append(
                    bench(base, impl, label, t, fn, timer, device)
                )
    records: list[dict[str, Any]] = []
    for (_impl, _label, t), recs in medians.items():
        ok = [r for r in recs if "ms" in r]
        rec = dict(recs[0]) if not ok else dict(ok[0])
        if ok:
            rec["ms"] = statistics.median(r["ms"] for r in ok)
            rec["ms_all"] = [r["ms"] for r in ok]
            add_throughput(rec, cfg, lengths, t)
        records.append(rec)

    # ratio to flex and a correctness check of ours vs the dense baseline
    index = {(r["impl"], r["kind"], r["step"]): r for r in records}
    for r in records:
        flex = index.get(("flex", r["kind"], r["step"]))
        if flex and "ms" in flex and "ms" in r:
            r["speedup_vs_flex"] = flex["ms"] / r["ms"]
    return records, dict(info, **check_vs_baselines(fns, inputs), config=base)


def configs(args: argparse.Namespace) -> list[dict[str, Any]]:
    base = {"steps": args.steps, "dtype": args.dtype}
    if args.quick:
        # N a multiple of 128: upstream's flex mask extension needs it; the second
        # is MLA-shaped (q/k 24 = 16 + 8, v 16)
        tiny = {"n": 128, "docs": 2, "steps": 2, "hq": 2, "hkv": 1}
        return [{**base, **tiny, "d": d, "dv": dv} for d, dv in ((16, 16), (24, 16))]
    heads = [tuple(int(x) for x in h.split("x")) for h in args.heads]
    dims = [tuple(int(x) for x in d.split("/")) for d in args.dims]
    return [
        {**base, "n": n, "docs": docs, "hq": hq, "hkv": hkv, "d": d, "dv": dv}
        for d, dv in dims
        for hq, hkv in heads
        for n in args.n
        for docs in args.docs
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (CPU smoke)")
    p.add_argument("--n", type=int, nargs="+", default=[2048, 8192, 16384])
    p.add_argument("--docs", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument(
        "--heads", nargs="+", default=["32x8", "64x64"], help="Hq x Hkv, e.g. 32x8"
    )
    p.add_argument(
        "--dims",
        nargs="+",
        default=["128/128", "192/128"],
        help="q/k and v head dims: 128/128 Llama-style, 192/128 MLA",
    )
    p.add_argument("--steps", type=int, default=7)
    p.add_argument("--dtype", default=None, help="default bf16 (fp32 with --quick)")
    p.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS)
    p.add_argument("--rounds", type=int, default=None, help="alternating rounds")
    p.add_argument("--warmup", type=int, default=25, help="do_bench warm-up ms")
    p.add_argument("--rep", type=int, default=100, help="do_bench repetition ms")
    p.add_argument("--out", type=Path, default=None, help="JSON output path")
    args = p.parse_args(argv)
    args.impls = tuple(args.impls)
    if args.dtype is None:
        args.dtype = "float32" if args.quick else "bfloat16"
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    from speculators_kimi.kernels.jit import interpreting

    if device.type == "cpu" and not interpreting():
        print("no CUDA device: set TRITON_INTERPRET=1 (with --quick)", file=sys.stderr)
        return 2
    timer = Timer(device, args.warmup, args.rep)
    result: dict[str, Any] = {
        **kernel_report("draft_attention", device, args.quick),
        "timing": timing_method(device),
        "results": [],
        "configs": [],
    }
    for cfg in configs(args):
        print(f"config {cfg}", flush=True)
        try:
            records, info = run_config(cfg, args, device, timer)
        except Exception as exc:
            traceback.print_exc()
            result["configs"].append(
                {"config": cfg, "error": f"{type(exc).__name__}: {exc}"[:500]}
            )
            continue
        result["results"].extend(records)
        result["configs"].append(info)
        for r in records:
            if r["kind"].startswith("loop") or r["step"] in (0, cfg["steps"] - 1):
                ms = f"{r['ms']:.3f} ms" if "ms" in r else r.get("error", "?")
                extra = ""
                if "tflop_per_s" in r:
                    extra = f" {r['tflop_per_s']:.1f} TFLOP/s {r['gb_per_s']:.0f} GB/s"
                if "speedup_vs_flex" in r:
                    extra += f" x{r['speedup_vs_flex']:.2f} vs flex"
                print(f"  {r['impl']:6s} {r['kind']:12s} step={r['step']} {ms}{extra}")
        if device.type == "cuda":
            torch.cuda.empty_cache()
        write(result, args.out)  # after every config: a cut-short run keeps results
    write(result, args.out)
    if args.out:
        print(f"wrote {args.out}")
    return 0


def write(result: dict[str, Any], out: Path | None) -> None:
    if out is None:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    save_json_report(result, out, show=False)


if __name__ == "__main__":
    raise SystemExit(main())
