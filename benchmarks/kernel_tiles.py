#!/usr/bin/env python
"""Per-kernel timings, a tile sweep and its check, and FlexAttention's split.

What the full ``draft_attention.py`` benchmark cannot say: which of our four kernels
(``fwd``, ``dq``, ``dkv0``, ``diag``) the time goes to, which tiles are faster, and
where flex spends its time. Four parts (``--parts``), each written to the JSON as
soon as a record is done, all bounded by ``--deadline`` seconds:

- ``timings``: each kernel alone with ``triton.testing.do_bench`` (median), at each
  shape, document count and TTT step. The launches are the real launchers'
  (``run_forward`` / ``run_backward``) recorded with ``jit.recording_launches`` (as
  ``kernels.cross_compile`` does), run once in order, then each replayed and timed
  by itself: no private launch helper is called, so a launcher's signature may
  change. The launchers' own times (forward, backward) are reported beside the sum.
- ``sweep``: per kernel, candidate tiles (``--candidates``) under
  ``configs.tile_overrides``; each candidate's outputs (O, LSE, dQ, dK, dV) are
  compared with the default tiles' (a bf16 tolerance: other tile orders round
  differently), then its kernel timed as above. A candidate that does not compile
  (shared memory), is not a power of two, or differs is recorded with why, never
  timed; the best matching config per kernel and shape is in ``sweep_best``.
- ``confirm``: the sweep's winners (``sweep_best`` of this run, or of
  ``--sweep-from`` JSON) launched together through the real launchers, per shape and
  document count, at the sweep's step and then the other timed steps: outputs
  against the default tiles', then the launchers' forward and backward times with
  both, so a tile change is chosen from its measured whole, not from one kernel.
- ``profile``: ``torch.profiler`` around ours and upstream's flex path (built exactly
  as ``draft_attention.py`` builds it: ``create_block_mask`` of upstream's mask mod,
  one extension per step, compiled ``flex_attention``): CUDA time per kernel name,
  forward (the forward-only profile), backward (forward + backward minus forward) and
  the per-batch mask build.

On CUDA, before timing, ``--workers`` processes compile every config the run will
launch (the same launches on zero inputs) in parallel, so the serial parts load
kernels from Triton's cache instead of compiling one after another.

``--quick`` runs tiny shapes on CPU under ``TRITON_INTERPRET=1`` (interpreter
timings, never a performance figure; flex backward is skipped: it has none on CPU).

    python benchmarks/kernel_tiles.py --out /tmp/tiles.json             # GPU
    python benchmarks/kernel_tiles.py --parts profile --out /tmp/p.json # GPU
    TRITON_INTERPRET=1 python benchmarks/kernel_tiles.py --quick --out /tmp/t.json
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import multiprocessing
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench_common import kernel_report, timing_method  # noqa: E402  (this directory)
from draft_attention import (  # noqa: E402  (this directory)
    Timer,
    build_impls,
    doc_lengths,
    make_document_ids,
    useful_flops,
)

from speculators_kimi.cli_args import save_json_report  # noqa: E402
from speculators_kimi.kernels import document_layout  # noqa: E402
from speculators_kimi.kernels.configs import (  # noqa: E402
    parse_tiles,
    tile_overrides,
)
from speculators_kimi.kernels.jit import (  # noqa: E402
    RecordedLaunch,
    lazy_jit,
    recording_launches,
)

#: Triton kernel function -> the name ``configs.KERNELS`` and the sweep use.
KERNEL_OF = {
    "_fwd_kernel": "fwd",
    "_dq_kernel": "dq",
    "_dkv0_kernel": "dkv0",
    "_diag_kernel": "diag",
}
#: (BLOCK_M, BLOCK_N, num_warps, num_stages), as ``configs`` takes them.
Config = tuple[int, int, int, int]

# The diagonal kernel's BLOCK_M counts rows x TTT steps (next power of two) per
# program. Candidates on Hopper: FlashAttention's and flex's shapes (flex's sm_90
# backward is FlexBwDConfig(64, 128, 128, 64, 3, 8): dK/dV 128 keys x 64 queries, dQ
# 128 queries x 64 keys, 8 warps, 3 stages), and smaller ones for the MLA heads.
GPU_CANDIDATES: dict[str, list[Config]] = {
    "dkv0": [
        (64, 128, 8, 3),
        (64, 128, 8, 2),
        (32, 128, 4, 3),
        (32, 128, 8, 2),
        (64, 64, 4, 3),
    ],
    "dq": [(128, 64, 8, 3), (128, 64, 8, 2), (64, 64, 4, 3), (64, 128, 8, 2)],
    "fwd": [(128, 64, 8, 3), (128, 128, 8, 2), (128, 64, 8, 2), (64, 64, 4, 3)],
    "diag": [
        (16, 0, 4, 1),
        (32, 0, 4, 1),
        (64, 0, 4, 1),
        (64, 0, 8, 1),
        (128, 0, 8, 1),
        (256, 0, 8, 1),
    ],
}
# Interpreter smoke: small tiles (the interpreter's default is 64 x 64), one that is
# not a power of two, to exercise the refusal, and whole-sequence tiles (one program:
# faster there), so that ``confirm`` has winners to check.
QUICK_CANDIDATES: dict[str, list[Config]] = {
    "dkv0": [(32, 64, 1, 1), (16, 32, 1, 1), (128, 128, 1, 1)],
    "dq": [(32, 32, 1, 1), (128, 128, 1, 1)],
    "fwd": [(16, 64, 1, 1), (128, 128, 1, 1)],
    "diag": [(16, 0, 1, 1), (24, 0, 1, 1)],
}
#: Kernel order of the sweep: where the time is expected to be first.
SWEEP_ORDER = ("dkv0", "dq", "fwd", "diag")
# |candidate - default| <= atol + rtol * max|default|, per output tensor.
TOLERANCE = {
    torch.float32: (1e-5, 1e-4),
    torch.float16: (5e-3, 1e-2),
    torch.bfloat16: (1e-2, 2e-2),
}
# A CUDA error that leaves the context unusable: stop the part, keep what is done.
FATAL_CUDA = (
    "illegal memory access",
    "unspecified launch failure",
    "device-side assert",
    "CUDA error",
)


class Stopped(BaseException):
    """The step's time limit (SIGTERM from ``timeout``) arrived; a BaseException,
    so no library's ``except Exception`` swallows it."""


def _on_sigterm(_signum: int, _frame: Any) -> None:
    raise Stopped("SIGTERM (the step's time limit)")


@dataclass(frozen=True)
class Shape:
    """Heads and head dims of one attention: ``HQxHKV:DQK/DV``."""

    hq: int
    hkv: int
    d: int
    dv: int

    @classmethod
    def parse(cls, text: str) -> Shape:
        heads, dims = text.split(":")
        hq, hkv = (int(x) for x in heads.split("x"))
        d, dv = (int(x) for x in dims.split("/"))
        return cls(hq, hkv, d, dv)

    @property
    def name(self) -> str:
        return f"{self.hq}x{self.hkv}:{self.d}/{self.dv}"


@dataclass
class Case:
    """One attention call's inputs: queries of one TTT step, ``blocks`` key blocks."""

    shape: Shape
    n: int
    docs: int
    blocks: int
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    do: torch.Tensor
    document_ids: torch.Tensor
    layout: torch.Tensor

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.shape.d)

    def describe(self) -> dict[str, Any]:
        return {
            "shape": self.shape.name,
            **asdict(self.shape),
            "n": self.n,
            "docs": self.docs,
            "step": self.blocks - 1,
            "dtype": str(self.q.dtype).removeprefix("torch."),
        }


def make_case(
    shape: Shape,
    n: int,
    docs: int,
    blocks: int,
    dtype: torch.dtype,
    device: torch.device,
    zeros: bool = False,
) -> Case:
    """Bounded random inputs (``0.5 * randn``, as ``draft_attention.py``), or zeros
    (compiling only)."""
    g = torch.Generator(device=device).manual_seed(0)

    def rnd(*size: int) -> torch.Tensor:
        if zeros:
            return torch.zeros(*size, device=device, dtype=dtype)
        x = torch.randn(*size, generator=g, device=device, dtype=torch.float32)
        return (0.5 * x).to(dtype)

    document_ids = make_document_ids(n, docs, device)
    return Case(
        shape,
        n,
        docs,
        blocks,
        q=rnd(1, shape.hq, n, shape.d),
        k=rnd(1, shape.hkv, blocks * n, shape.d),
        v=rnd(1, shape.hkv, blocks * n, shape.dv),
        do=rnd(1, shape.hq, n, shape.dv),
        document_ids=document_ids,
        layout=document_layout(document_ids),
    )


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def attention(case: Case) -> dict[str, torch.Tensor]:
    """Forward and backward through the real launchers (what training runs)."""
    from speculators_kimi.kernels.backward import run_backward
    from speculators_kimi.kernels.forward import run_forward

    o, lse = run_forward(case.q, case.k, case.v, case.layout, case.scale, None)
    dq, dk, dv = run_backward(
        case.do, case.q, case.k, case.v, o, lse, case.layout, case.scale, None
    )
    return {"o": o, "lse": lse, "dq": dq, "dk": dk, "dv": dv}


def kernel_of(launch: RecordedLaunch) -> str:
    name = launch.fn.__name__
    return KERNEL_OF.get(name, name.strip("_"))


def replay(launch: RecordedLaunch) -> None:
    """Launch a recorded launch again (the same JIT-compiled kernel as the
    launchers', through ``lazy_jit``'s cache)."""
    lazy_jit(launch.fn)()[launch.grid](*launch.args, **launch.kwargs)


def replay_all(launches: list[RecordedLaunch]) -> None:
    for launch in launches:
        replay(launch)


def record(case: Case) -> list[RecordedLaunch]:
    """The launches of one forward + backward, recorded, not run."""
    from speculators_kimi.kernels.backward import run_backward
    from speculators_kimi.kernels.forward import run_forward

    with recording_launches() as launches:
        o, lse = run_forward(case.q, case.k, case.v, case.layout, case.scale, None)
        run_backward(
            case.do, case.q, case.k, case.v, o, lse, case.layout, case.scale, None
        )
    return list(launches)


def recorded_and_run(case: Case) -> tuple[list[RecordedLaunch], list[float]]:
    """The recorded launches, each run once in order (so the backward's inputs,
    O, LSE and delta, hold real values), with the seconds each first run took
    (compile or cache load included)."""
    launches = record(case)
    firsts = []
    for launch in launches:
        started = time.perf_counter()
        replay(launch)
        synchronize(case.q.device)
        firsts.append(time.perf_counter() - started)
    return launches, firsts


#: The launch options and constexprs a config sets, in ``Config`` order.
CONFIG_FIELDS = ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")


def launch_config(launch: RecordedLaunch) -> list[int | None]:
    """The config a launch used, in ``Config`` order; None where the launcher
    does not pass the field (the diagonal kernel's BLOCK_N and num_stages)."""
    return [launch.kwargs.get(name) for name in CONFIG_FIELDS]


def same_config(candidate: Config, launched: list[int | None]) -> bool:
    """Whether a candidate is what the launcher used (fields it does not pass
    do not count)."""
    return all(
        used is None or used == value
        for used, value in zip(launched, candidate, strict=True)
    )


def config_problem(kernel: str, config: Config) -> str | None:
    """Why a candidate cannot be launched, before trying (tiles and warps must be
    powers of two; the diagonal kernel has no BLOCK_N)."""

    def power_of_two(x: int) -> bool:
        return x >= 1 and x & (x - 1) == 0

    block_m, block_n, warps, stages = config
    if not power_of_two(block_m):
        return f"BLOCK_M {block_m} is not a power of two"
    if kernel != "diag" and not power_of_two(block_n):
        return f"BLOCK_N {block_n} is not a power of two"
    if not power_of_two(warps):
        return f"num_warps {warps} is not a power of two"
    if stages < 1:
        return f"num_stages {stages} < 1"
    return None


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


def is_fatal(message: str) -> bool:
    return any(marker in message for marker in FATAL_CUDA)


class Deadline:
    """Seconds left of the run's budget."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


# -- parallel precompile ---------------------------------------------------------

#: (shape, n, blocks, dtype, kernel or None for every kernel, config or None)
Task = tuple[str, int, int, str, str | None, Config | None]
_WORKER: dict[str, Any] = {}


def _precompile(task: Task) -> dict[str, Any]:
    """In a worker process: launch one config on zero inputs (compiling it into
    Triton's cache), or every kernel at the default tiles."""
    shape, n, blocks, dtype, kernel, config = task
    started = time.perf_counter()
    out: dict[str, Any] = {
        "shape": shape,
        "step": blocks - 1,
        "kernel": kernel,
        "config": config,
    }
    try:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        key = (shape, n, blocks, dtype)
        if _WORKER.get("key") != key:
            _WORKER.clear()
            if device.type == "cuda":
                torch.cuda.empty_cache()
            _WORKER["case"] = make_case(
                Shape.parse(shape), n, 1, blocks, getattr(torch, dtype), device, True
            )
            _WORKER["key"] = key
        case = _WORKER["case"]
        overrides = {kernel: config} if kernel and config else {}
        with tile_overrides(overrides):
            launches = record(case)
        for launch in launches:
            if kernel is None or kernel_of(launch) == kernel:
                replay(launch)
        synchronize(device)
    except Exception as exc:
        out["error"] = error_text(exc)
    out["seconds"] = time.perf_counter() - started
    return out


def precompile(tasks: list[Task], workers: int, budget: float) -> dict[str, Any]:
    """Run the tasks on ``workers`` spawned processes until done or ``budget``
    seconds; the serial parts then find the kernels in Triton's cache."""
    started = time.perf_counter()
    report: dict[str, Any] = {"workers": workers, "tasks": len(tasks)}
    ctx = multiprocessing.get_context("spawn")
    pool = ctx.Pool(workers)
    try:
        pending = [pool.apply_async(_precompile, (task,)) for task in tasks]
        end = time.monotonic() + budget
        for result in pending:
            result.wait(max(0.0, end - time.monotonic()))
        done = [r.get() for r in pending if r.ready() and r.successful()]
    finally:
        pool.terminate()
        pool.join()
    report["done"] = len(done)
    report["errors"] = [d for d in done if "error" in d]
    report["task_seconds_max"] = max((d["seconds"] for d in done), default=None)
    report["wall_s"] = time.perf_counter() - started
    report["cut_short"] = len(done) < len(tasks)
    return report


# -- the three parts -------------------------------------------------------------


@dataclass
class Run:
    """What every part shares: arguments, device, timer, the report and its file."""

    args: argparse.Namespace
    device: torch.device
    dtype: torch.dtype
    timer: Timer
    deadline: Deadline
    result: dict[str, Any]

    def write(self) -> None:
        if self.args.out is not None:
            save_json_report(self.result, self.args.out, show=False)

    @contextlib.contextmanager
    def recorded(
        self, records: list[dict[str, Any]], base: dict[str, Any]
    ) -> Iterator[None]:
        """One case of a part: an error (out of memory, say: the next case may
        fit) is recorded as ``base`` with its text and the part goes on, unless
        the device is lost (:func:`is_fatal`); the report is written either way."""
        try:
            yield
        except Exception as exc:
            traceback.print_exc()
            records.append(dict(base, error=error_text(exc)))
            if is_fatal(str(exc)):
                self.write()
                raise
        self.write()

    def bench(self, fn: Callable[[], Any]) -> float:
        return self.timer(fn)


def part_timings(run: Run, shapes: list[Shape]) -> None:
    """Each kernel alone, per shape, document count and step."""
    args = run.args
    records: list[dict[str, Any]] = run.result.setdefault("kernel_timings", [])
    for shape in shapes:
        for docs in args.docs:
            for step in args.steps:
                if run.deadline.left() <= 0:
                    run.result["timings_cut_short"] = True
                    return
                case = make_case(shape, args.n, docs, step + 1, run.dtype, run.device)
                base = case.describe()
                print(f"timings {base}", flush=True)
                with run.recorded(records, base):
                    launches, firsts = recorded_and_run(case)
                    lengths = doc_lengths(case.document_ids)
                    fwd_flops, bwd_flops = useful_flops(
                        lengths, case.n, shape.hq, shape.d, shape.dv, case.blocks
                    )
                    kernels_ms = 0.0
                    for launch, first in zip(launches, firsts, strict=True):
                        ms = run.bench(functools.partial(replay, launch))
                        kernels_ms += ms
                        rec = dict(
                            base,
                            kernel=kernel_of(launch),
                            ms=ms,
                            config=launch_config(launch),
                            grid=list(launch.grid),
                            first_launch_s=first,
                        )
                        if rec["kernel"] == "fwd":
                            rec["useful_tflop_per_s"] = fwd_flops / (ms * 1e-3) / 1e12
                        records.append(rec)
                        print(f"  {rec['kernel']:5s} {ms:.3f} ms", flush=True)
                    out = attention(case)  # real O and LSE for the backward
                    fwd_ms, bwd_ms = launcher_times(run, case, out)
                    records.append(
                        dict(
                            base,
                            kernel="all",
                            kernels_sum_ms=kernels_ms,
                            forward_launcher_ms=fwd_ms,
                            backward_launcher_ms=bwd_ms,
                            useful_tflop_per_s_fwd_bwd=(fwd_flops + bwd_flops)
                            / ((fwd_ms + bwd_ms) * 1e-3)
                            / 1e12,
                        )
                    )
                    print(
                        f"  sum {kernels_ms:.3f} ms; launchers fwd {fwd_ms:.3f} "
                        f"bwd {bwd_ms:.3f} ms",
                        flush=True,
                    )


def launcher_times(
    run: Run, case: Case, out: dict[str, torch.Tensor]
) -> tuple[float, float]:
    """``run_forward`` and ``run_backward`` as the autograd function calls them."""
    from speculators_kimi.kernels.backward import run_backward
    from speculators_kimi.kernels.forward import run_forward

    def fwd() -> Any:
        return run_forward(case.q, case.k, case.v, case.layout, case.scale, None)

    def bwd() -> Any:
        return run_backward(
            case.do,
            case.q,
            case.k,
            case.v,
            out["o"],
            out["lse"],
            case.layout,
            case.scale,
            None,
        )

    return run.bench(fwd), run.bench(bwd)


def compare(
    got: dict[str, torch.Tensor], ref: dict[str, torch.Tensor], dtype: torch.dtype
) -> tuple[dict[str, float], dict[str, float], bool]:
    """Max |got - ref| per output, its tolerance, and whether all are within."""
    atol, rtol = TOLERANCE[dtype]
    diffs, tols, ok = {}, {}, True
    for name, r in ref.items():
        r32 = r.float()
        diff = float((got[name].float() - r32).abs().max())
        tol = atol + rtol * float(r32.abs().max())
        diffs[name], tols[name] = diff, tol
        ok = ok and math.isfinite(diff) and diff <= tol
    return diffs, tols, ok


def part_sweep(
    run: Run, shapes: list[Shape], candidates: dict[str, list[Config]]
) -> None:
    """Candidate tiles per kernel, checked against the default tiles, then timed."""
    args = run.args
    records: list[dict[str, Any]] = run.result.setdefault("sweep", [])
    for shape in shapes:
        for docs in args.sweep_docs:
            if run.deadline.left() <= 0:
                run.result["sweep_cut_short"] = True
                return
            case = make_case(
                shape, args.n, docs, args.sweep_step + 1, run.dtype, run.device
            )
            print(f"sweep {case.describe()}", flush=True)
            with run.recorded(records, case.describe()):
                sweep_case(run, case, candidates)
            if run.result.get("sweep_cut_short") or run.result.get("sweep_stopped"):
                return


def sweep_case(run: Run, case: Case, candidates: dict[str, list[Config]]) -> None:
    """Every kernel's candidates at one case, against its default tiles."""
    records: list[dict[str, Any]] = run.result["sweep"]
    best: list[dict[str, Any]] = run.result.setdefault("sweep_best", [])
    base = case.describe()
    ref = {k: t.clone() for k, t in attention(case).items()}
    default_launches, _ = recorded_and_run(case)
    for kernel in [k for k in SWEEP_ORDER if k in run.args.kernels]:
        mine = [x for x in default_launches if kernel_of(x) == kernel]
        if not mine:
            records.append(dict(base, kernel=kernel, error="not launched at this step"))
            continue
        default = launch_config(mine[0])
        default_ms = run.bench(functools.partial(replay_all, mine))
        rows = [
            dict(
                base,
                kernel=kernel,
                config=default,
                is_default=True,
                ms=default_ms,
                matches=True,
            )
        ]
        print(f"  {kernel:5s} default {default} {default_ms:.3f} ms", flush=True)
        for config in candidates.get(kernel, []):
            if same_config(config, default):
                continue
            if run.deadline.left() <= 0:
                run.result["sweep_cut_short"] = True
                break
            rec = dict(base, **sweep_one(run, case, ref, kernel, config))
            rec["default_ms"] = default_ms
            if "ms" in rec:
                rec["speedup_vs_default"] = default_ms / rec["ms"]
            rows.append(rec)
            shown = f"{rec['ms']:.3f} ms" if "ms" in rec else rec.get("error")
            print(f"  {kernel:5s} {config} {shown}", flush=True)
            if is_fatal(rec.get("error", "")):
                run.result["sweep_stopped"] = rec["error"]
                break
        records.extend(rows)
        timed = [r for r in rows if r.get("matches") and "ms" in r]
        winner = min(timed, key=lambda r: r["ms"])
        best.append(
            dict(
                base,
                kernel=kernel,
                default_config=default,
                default_ms=default_ms,
                best_config=winner["config"],
                best_ms=winner["ms"],
                speedup_vs_default=default_ms / winner["ms"],
                candidates_timed=len(timed),
                complete=not (
                    run.result.get("sweep_cut_short") or run.result.get("sweep_stopped")
                ),
            )
        )
        run.write()
        if run.result.get("sweep_cut_short") or run.result.get("sweep_stopped"):
            return


def sweep_one(
    run: Run, case: Case, ref: dict[str, torch.Tensor], kernel: str, config: Config
) -> dict[str, Any]:
    """One candidate: its outputs against the default's, then (if equal within
    tolerance) its kernel's time."""
    rec: dict[str, Any] = {
        "kernel": kernel,
        "config": list(config),
        "is_default": False,
    }
    problem = config_problem(kernel, config)
    if problem:
        rec["error"] = problem
        return rec
    try:
        with tile_overrides({kernel: config}):
            got = attention(case)
            synchronize(run.device)
            diffs, tols, ok = compare(got, ref, run.dtype)
            rec.update(max_abs_diff=diffs, tolerance=tols, matches=ok)
            del got
            if ok:
                launches, _ = recorded_and_run(case)
                mine = [x for x in launches if kernel_of(x) == kernel]
                rec["launched"] = launch_config(mine[0])
                rec["ms"] = run.bench(functools.partial(replay_all, mine))
    except Exception as exc:  # out of shared memory, ...: recorded, not fatal
        rec["error"] = error_text(exc)
    return rec


#: A sweep winner below this speedup over its default is noise, not a choice.
CONFIRM_MIN_SPEEDUP = 1.03


def sweep_winners(swept: list[dict[str, Any]]) -> dict[str, Config]:
    """The faster tiles, per kernel, among one shape's and document count's
    ``sweep_best`` records."""
    return {
        b["kernel"]: cast(Config, tuple(b["best_config"]))
        for b in swept
        if b["best_config"] != b["default_config"]
        and b["speedup_vs_default"] >= CONFIRM_MIN_SPEEDUP
    }


def load_sweep_best(path: Path | None) -> list[dict[str, Any]]:
    if path is None or not path.is_file():
        raise SystemExit(
            f"--parts confirm needs a sweep: run it with --parts sweep confirm, or "
            f"pass --sweep-from the JSON of a run that swept ({path} is not one)"
        )
    best: list[dict[str, Any]] = json.loads(path.read_text()).get("sweep_best", [])
    return best


def part_confirm(
    run: Run, shapes: list[Shape], swept: list[dict[str, Any]] | None
) -> None:
    """The sweep's winners together (this run's sweep, else ``swept``), per shape and
    document count: the sweep's step first (its kernels are compiled), then the
    other timed steps."""
    args = run.args
    best = run.result.get("sweep_best") or swept or []
    records: list[dict[str, Any]] = run.result.setdefault("confirm", [])
    chosen: dict[tuple[Shape, int], dict[str, Config]] = {}
    for shape in shapes:
        for docs in args.sweep_docs:
            here = [b for b in best if b["shape"] == shape.name and b["docs"] == docs]
            winners = sweep_winners(here)
            if winners:
                chosen[shape, docs] = winners
            elif here:  # swept: the default tiles won
                records.append({"shape": shape.name, "docs": docs, "overrides": {}})
            else:
                records.append({"shape": shape.name, "docs": docs, "not_swept": True})
    steps = [args.sweep_step, *(s for s in args.steps if s != args.sweep_step)]
    for step in steps:
        for (shape, docs), winners in chosen.items():
            if run.deadline.left() <= 0:
                run.result["confirm_cut_short"] = True
                return
            case = make_case(shape, args.n, docs, step + 1, run.dtype, run.device)
            base = dict(
                case.describe(), overrides={k: list(c) for k, c in winners.items()}
            )
            print(f"confirm {base}", flush=True)
            with run.recorded(records, base):
                records.append(dict(base, **confirm_one(run, case, winners)))


def confirm_one(run: Run, case: Case, winners: dict[str, Config]) -> dict[str, Any]:
    """Outputs with the winners against the default tiles', then both timed."""
    ref = {k: t.clone() for k, t in attention(case).items()}
    with tile_overrides(winners):
        got = attention(case)
        synchronize(run.device)
    diffs, tols, ok = compare(got, ref, run.dtype)
    rec: dict[str, Any] = {"max_abs_diff": diffs, "tolerance": tols, "matches": ok}
    if not ok:
        return rec
    default_fwd, default_bwd = launcher_times(run, case, ref)
    with tile_overrides(winners):
        fwd, bwd = launcher_times(run, case, got)
    rec.update(
        default_fwd_ms=default_fwd,
        default_bwd_ms=default_bwd,
        fwd_ms=fwd,
        bwd_ms=bwd,
        speedup_fwd_bwd=(default_fwd + default_bwd) / (fwd + bwd),
    )
    print(
        f"  default {default_fwd:.3f} + {default_bwd:.3f} ms, winners {fwd:.3f} + "
        f"{bwd:.3f} ms: x{rec['speedup_fwd_bwd']:.2f}",
        flush=True,
    )
    return rec


def profile_kernels(
    fn: Callable[[], Any], device: torch.device, iters: int
) -> dict[str, tuple[float, int]]:
    """Per kernel name (per op name on CPU): self time in microseconds and calls,
    summed over ``iters`` calls of ``fn``."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        for _ in range(iters):
            fn()
        synchronize(device)
    found: dict[str, tuple[float, int]] = {}
    want = DeviceType.CUDA if device.type == "cuda" else DeviceType.CPU
    for evt in prof.key_averages():
        if evt.device_type != want:
            continue
        us: Any = evt.self_cpu_time_total
        if want == DeviceType.CUDA:  # torch < 2.4 named it self_cuda_time_total
            us = getattr(evt, "self_device_time_total", None)
            if us is None:
                us = getattr(evt, "self_cuda_time_total", 0.0)
        found[str(evt.key)[:200]] = (float(us), int(evt.count))
    return found


def split(
    fwd: dict[str, tuple[float, int]],
    both: dict[str, tuple[float, int]],
    iters: int,
) -> list[dict[str, Any]]:
    """Per kernel: forward time (the forward-only profile) and backward time (the
    forward + backward profile minus it), per call of the attention."""
    rows: list[dict[str, Any]] = []
    for name in sorted(set(fwd) | set(both)):
        f_us, f_n = fwd.get(name, (0.0, 0))
        b_us, b_n = both.get(name, (f_us, f_n))
        rows.append(
            {
                "name": name,
                "fwd_us": f_us / iters,
                "bwd_us": max(b_us - f_us, 0.0) / iters,
                "fwd_calls": f_n / iters,
                "bwd_calls": max(b_n - f_n, 0) / iters,
            }
        )
    rows.sort(key=lambda r: -(r["fwd_us"] + r["bwd_us"]))
    return rows


def part_profile(run: Run, shapes: list[Shape]) -> None:
    """Ours and flex under the profiler: forward, backward and mask kernels."""
    args = run.args
    records: list[dict[str, Any]] = run.result.setdefault("profile", [])
    for shape in shapes:
        for docs in args.profile_docs:
            for step in args.steps:
                case = make_case(shape, args.n, docs, step + 1, run.dtype, run.device)
                for impl in args.profile_impls:
                    if run.deadline.left() <= 0:
                        run.result["profile_cut_short"] = True
                        return
                    base = dict(case.describe(), impl=impl)
                    print(f"profile {base}", flush=True)
                    with run.recorded(records, base):
                        records.append(dict(base, **profile_one(run, case, impl)))


def profile_one(run: Run, case: Case, impl: str) -> dict[str, Any]:
    """One impl at one case: warm-up (compiles), then the three profiles."""
    device, iters = run.device, run.args.profile_iters
    gqa = case.shape.hq != case.shape.hkv

    def build() -> Any:
        return build_impls(case.document_ids, case.n, case.blocks, device, gqa, (impl,))

    fns, info = build()
    if impl not in fns:
        raise RuntimeError(str(info.get(f"{impl}_error", "not built")))
    f = fns[impl][case.blocks - 1]
    backward = device.type == "cuda" or impl != "flex"  # flex: no CPU backward
    q = case.q.detach().requires_grad_(backward)
    k = case.k.detach().requires_grad_(backward)
    v = case.v.detach().requires_grad_(backward)

    def forward() -> Any:
        return f(q, k, v)

    def forward_backward() -> None:
        q.grad = k.grad = v.grad = None
        f(q, k, v).backward(case.do)

    started = time.perf_counter()
    forward_backward() if backward else forward()  # compile, autotune, caches
    synchronize(device)
    out: dict[str, Any] = {"warmup_s": time.perf_counter() - started, "iters": iters}
    fwd = profile_kernels(forward, device, iters)
    both = profile_kernels(forward_backward, device, iters) if backward else fwd
    out["kernels"] = split(fwd, both, iters)
    out["fwd_us"] = sum(r["fwd_us"] for r in out["kernels"])
    out["bwd_us"] = sum(r["bwd_us"] for r in out["kernels"]) if backward else None
    mask = profile_kernels(build, device, 1)  # per batch: layout, or block masks
    out["mask_kernels"] = [
        {"name": name, "us": us, "calls": n}
        for name, (us, n) in sorted(mask.items(), key=lambda kv: -kv[1][0])
    ][:30]
    out["mask_us"] = sum(us for us, _ in mask.values())
    top = ", ".join(
        f"{r['name'][:40]} {r['fwd_us'] + r['bwd_us']:.0f}us"
        for r in out["kernels"][:4]
    )
    print(f"  fwd {out['fwd_us']:.0f} us bwd {out['bwd_us']} us: {top}", flush=True)
    return out


# -- driver ----------------------------------------------------------------------


def parse_candidates(items: Sequence[str]) -> dict[str, list[Config]]:
    """``KERNEL=BMxBNxWxS,...`` (``dkv0=64x128x8x3,32x128x4x3``)."""
    try:
        return dict(parse_tiles(item) for item in items)
    except ValueError as exc:
        raise SystemExit(f"--candidates: {exc}") from None


def precompile_tasks(
    args: argparse.Namespace,
    timing_shapes: list[Shape],
    sweep_shapes: list[Shape],
    candidates: dict[str, list[Config]],
) -> list[Task]:
    """Defaults at every timed step first, then the sweep's candidates in the
    sweep's order (so a cut leaves the first ones compiled)."""
    dtype = args.dtype
    tasks: list[Task] = []
    if "timings" in args.parts:
        tasks += [
            (s.name, args.n, step + 1, dtype, None, None)
            for s in timing_shapes
            for step in args.steps
        ]
    if "sweep" in args.parts:
        blocks = args.sweep_step + 1
        tasks += [(s.name, args.n, blocks, dtype, None, None) for s in sweep_shapes]
        tasks += [
            (s.name, args.n, blocks, dtype, kernel, config)
            for s in sweep_shapes
            for kernel in SWEEP_ORDER
            if kernel in args.kernels
            for config in candidates.get(kernel, [])
            if config_problem(kernel, config) is None
        ]
    return list(dict.fromkeys(tasks))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (CPU smoke)")
    p.add_argument(
        "--parts",
        nargs="+",
        default=["timings", "sweep", "confirm", "profile"],
        choices=["timings", "sweep", "confirm", "profile"],
    )
    p.add_argument("--n", type=int, default=8192)
    p.add_argument(
        "--shapes",
        nargs="+",
        default=None,
        help="HQxHKV:DQK/DV (default 32x8:128/128 64x64:128/128 64x64:192/128)",
    )
    p.add_argument("--docs", type=int, nargs="+", default=[1, 16])
    p.add_argument(
        "--steps",
        type=int,
        nargs="+",
        default=None,
        help="TTT steps timed and profiled (default 0 6)",
    )
    p.add_argument("--sweep-shapes", nargs="+", default=None, help="default --shapes")
    p.add_argument(
        "--sweep-docs", type=int, nargs="+", default=None, help="default --docs"
    )
    p.add_argument("--sweep-step", type=int, default=None, help="default 6")
    p.add_argument(
        "--kernels",
        nargs="+",
        default=list(SWEEP_ORDER),
        choices=SWEEP_ORDER,
        help="kernels the sweep tries tiles of",
    )
    p.add_argument(
        "--candidates",
        nargs="+",
        default=[],
        help="replace a kernel's candidates: dkv0=64x128x8x3,32x128x4x3",
    )
    p.add_argument(
        "--sweep-from",
        type=Path,
        default=None,
        help="confirm the winners of this JSON's sweep (--parts confirm alone)",
    )
    p.add_argument("--profile-shapes", nargs="+", default=None, help="default --shapes")
    p.add_argument(
        "--profile-docs", type=int, nargs="+", default=None, help="default --docs"
    )
    p.add_argument(
        "--profile-impls",
        nargs="+",
        default=["triton", "flex"],
        choices=["triton", "flex"],
    )
    p.add_argument("--profile-iters", type=int, default=None, help="default 5")
    p.add_argument("--dtype", default=None, help="default bf16 (fp32 with --quick)")
    p.add_argument(
        "--deadline",
        type=float,
        default=420.0,
        help="seconds for the whole run; parts stop cleanly after it",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="precompile processes (default: CPUs - 2, at most 12, on "
        "CUDA; 0 with --quick)",
    )
    p.add_argument(
        "--precompile-budget",
        type=float,
        default=None,
        help="seconds (default: a third of --deadline)",
    )
    p.add_argument("--warmup", type=int, default=25, help="do_bench warm-up ms")
    p.add_argument("--rep", type=int, default=100, help="do_bench repetition ms")
    p.add_argument("--out", type=Path, default=None, help="JSON output path")
    args = p.parse_args(argv)
    deadline = Deadline(args.deadline)
    signal.signal(signal.SIGTERM, _on_sigterm)

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    from speculators_kimi.kernels.jit import interpreting

    if device.type == "cpu" and not interpreting():
        print("no CUDA device: set TRITON_INTERPRET=1 (with --quick)", file=sys.stderr)
        return 2
    quick = args.quick
    args.dtype = args.dtype or ("float32" if quick else "bfloat16")
    if quick:
        args.n, args.docs = 128, [2]
    args.shapes = args.shapes or (
        ["2x1:16/16", "2x2:24/16"]
        if quick
        else ["32x8:128/128", "64x64:128/128", "64x64:192/128"]
    )
    args.steps = args.steps or ([0, 1] if quick else [0, 6])
    args.sweep_step = (
        args.sweep_step if args.sweep_step is not None else max(args.steps)
    )
    args.sweep_shapes = args.sweep_shapes or args.shapes
    args.sweep_docs = args.sweep_docs or args.docs
    args.profile_shapes = args.profile_shapes or args.shapes
    args.profile_docs = args.profile_docs or args.docs
    args.profile_iters = args.profile_iters or (1 if quick else 5)
    if args.workers is None:
        args.workers = (
            0 if device.type != "cuda" else min(12, (os.cpu_count() or 4) - 2)
        )
    if args.precompile_budget is None:
        args.precompile_budget = args.deadline / 3
    candidates = dict(QUICK_CANDIDATES if quick else GPU_CANDIDATES)
    candidates.update(parse_candidates(args.candidates))
    dtype = getattr(torch, args.dtype)

    timer = Timer(device, args.warmup, args.rep)
    result: dict[str, Any] = {
        **kernel_report("kernel_tiles", device, quick),
        "interpreter_timings": device.type != "cuda",
        "timing": timing_method(device),
        "arguments": {k: v for k, v in vars(args).items() if k != "out"},
        "candidates": candidates,
        "tolerance": {
            "atol_rtol": list(TOLERANCE[dtype]),
            "rule": "|candidate - default| <= atol + rtol * max|default| "
            "per output (o, lse, dq, dk, dv)",
        },
    }
    run = Run(args, device, dtype, timer, deadline, result)
    swept = None  # the winners to confirm come from another run's sweep
    if "confirm" in args.parts and "sweep" not in args.parts:
        swept = load_sweep_best(args.sweep_from)
    shapes = [Shape.parse(s) for s in args.shapes]
    sweep_shapes = [Shape.parse(s) for s in args.sweep_shapes]
    started = time.perf_counter()
    status = 0
    try:
        if args.workers > 0 and {"timings", "sweep"} & set(args.parts):
            tasks = precompile_tasks(args, shapes, sweep_shapes, candidates)
            print(
                f"precompile: {len(tasks)} launches on {args.workers} processes",
                flush=True,
            )
            budget = min(args.precompile_budget, deadline.left())
            result["precompile"] = precompile(tasks, args.workers, budget)
            print(
                f"precompile: {result['precompile']['done']} done in "
                f"{result['precompile']['wall_s']:.1f} s",
                flush=True,
            )
            run.write()
        parts: dict[str, Callable[[], None]] = {
            "timings": lambda: part_timings(run, shapes),
            "sweep": lambda: part_sweep(run, sweep_shapes, candidates),
            "confirm": lambda: part_confirm(run, sweep_shapes, swept),
            "profile": lambda: part_profile(
                run, [Shape.parse(s) for s in args.profile_shapes]
            ),
        }
        for name in args.parts:
            part_started = time.perf_counter()
            try:
                parts[name]()
            except Exception as exc:  # a fatal CUDA error: later parts cannot run
                traceback.print_exc()
                result.setdefault("errors", []).append(f"{name}: {error_text(exc)}")
                status = 1
                break
            finally:
                result.setdefault("part_seconds", {})[name] = (
                    time.perf_counter() - part_started
                )
            if "sweep_stopped" in result:  # a CUDA error: the context is unusable
                status = 1
                break
    except (Stopped, KeyboardInterrupt) as exc:
        result["stopped"] = error_text(exc)
        status = 3
    result["wall_s"] = time.perf_counter() - started
    run.write()
    if args.out:
        print(f"wrote {args.out}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
