"""Compile the draft-attention kernels for a GPU on a machine without one.

The real launchers (``run_forward`` / ``run_backward``) run on ``meta`` tensors with
their launches recorded instead of executed, so each kernel is compiled with exactly
the arguments, constexprs, tile sizes, warps and stages a GPU run would use. Triton
compiles it for the target architecture (default sm_90: H100/H200) down to a cubin
with its bundled ``ptxas``, whose ``-v`` log (Triton's, of the cubin it launches)
reports what the GPU must provide per program: registers per thread, spills, and
(from Triton) shared memory. Triton's bundled ``nvdisasm`` then says where the
spills are: a spill inside a loop is paid on every key tile, one before or after the
loops once per program.

This is a static check (does it build, does it fit, does it spill), never a speed
figure: ``python -m speculators_kimi.kernels.cross_compile --arch 90 --json
report.json``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import inspect
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from .configs import KernelConfig, parse_tiles, tile_overrides
from .jit import RecordedLaunch, recording_launches

__all__ = [
    "DOT_KERNELS",
    "SHARED_MEMORY_LIMIT",
    "SPILL_BUDGET_BYTES",
    "WIDE_HEAD_SPILL_BUDGET_BYTES",
    "Case",
    "KernelBuild",
    "build_case",
    "compile_launch",
    "loop_spills",
    "main",
    "record_case",
]

# Largest dynamic shared memory one program may opt into, by compute capability.
SHARED_MEMORY_LIMIT: dict[int, int] = {80: 166912, 86: 101376, 89: 101376, 90: 232448}

#: The kernels whose block-0 dots must be warpgroup MMAs (wgmma) on Hopper.
DOT_KERNELS = ("fwd_kernel", "dq_kernel", "dkv0_kernel")

#: Spill bytes per thread (stored or loaded) a 16-bit kernel may have when some
#: of its spill instructions sit inside a loop (paid on every key tile). The fast
#: attention backwards (FlashAttention 2/3, flex) run their 128 x 64 tiles with a
#: small spill rather than shrink the tile off the tensor cores; a spill is a cost
#: to weigh on a GPU, not a defect in itself, and one outside every loop (paid
#: once per program, before or after the key tiles) is reported, not refused.
SPILL_BUDGET_BYTES = 512
#: Heads wider than 192 (padded to 256): one fp32 accumulator of a 256-wide tile
#: takes half the registers of 8 warps, and no wgmma tile avoids a spill.
WIDE_HEAD_SPILL_BUDGET_BYTES = 2048

_TRITON_TYPES = {
    torch.float32: "fp32",
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.bool: "i1",
}
_LAUNCH_OPTIONS = ("num_warps", "num_stages")


@dataclasses.dataclass(frozen=True)
class Case:
    """One attention call: shapes, dtype, window and TTT step count. ``head_dim``
    is the q/k head dim; ``v_head_dim`` defaults to it (MLA: 192 and 128)."""

    head_dim: int
    dtype: torch.dtype
    q_heads: int = 64
    kv_heads: int = 64
    n: int = 8192
    ttt_steps: int = 3
    window: int | None = None
    v_head_dim: int | None = None

    @property
    def d_v(self) -> int:
        return self.head_dim if self.v_head_dim is None else self.v_head_dim

    @property
    def name(self) -> str:
        window = f"-w{self.window}" if self.window is not None else ""
        dtype = str(self.dtype).removeprefix("torch.")
        v = f"v{self.d_v}" if self.d_v != self.head_dim else ""
        return f"{dtype}-d{self.head_dim}{v}-h{self.q_heads}x{self.kv_heads}{window}"


@dataclasses.dataclass
class KernelBuild:
    """What one compiled kernel needs from the GPU."""

    case: str
    kernel: str
    dtype: str
    constexprs: dict[str, Any]
    num_warps: int
    num_stages: int
    shared_bytes: int
    registers: int
    spill_store_bytes: int
    spill_load_bytes: int
    stack_bytes: int
    compile_s: float
    wgmma: int
    mma_sync: int
    #: Spill instructions (``STL``/``LDL``) inside a loop of the SASS: the costly
    #: kind, paid per key tile. ``None`` when Triton ships no ``nvdisasm``.
    loop_spills: int | None = None

    def problems(self, arch: int) -> list[str]:
        """Reasons this kernel cannot launch on ``arch``, or, with 16-bit inputs
        (what training runs), would run slow: a block-0 kernel whose dots are not
        all Hopper warpgroup MMAs on sm_90+ (``mma.sync`` is the Ampere
        instruction, at a fraction of the throughput), or spills past
        ``SPILL_BUDGET_BYTES`` with spill instructions inside a loop (or not known
        to be outside: no ``nvdisasm``). fp32 builds are IEEE-matmul correctness
        runs: reported, not refused."""
        found = []
        limit = SHARED_MEMORY_LIMIT.get(arch)
        if limit is not None and self.shared_bytes > limit:
            found.append(
                f"{self.case} {self.kernel}: {self.shared_bytes} bytes of shared "
                f"memory, sm_{arch} allows {limit}"
            )
        if self.dtype == "float32":
            return found
        if (
            arch >= 90
            and self.kernel in DOT_KERNELS
            and (self.mma_sync or not self.wgmma)
        ):
            found.append(
                f"{self.case} {self.kernel}: {self.wgmma} wgmma and "
                f"{self.mma_sync} mma.sync instructions; every dot must be wgmma "
                f"on sm_{arch} ({self.num_warps} warps)"
            )
        spilled = max(self.spill_store_bytes, self.spill_load_bytes)
        if spilled > self.spill_budget and self.loop_spills != 0:
            found.append(
                f"{self.case} {self.kernel}: spills {self.spill_store_bytes} bytes "
                f"stored, {self.spill_load_bytes} loaded per thread "
                f"({self.registers} registers at {self.num_warps} warps; "
                f"{'?' if self.loop_spills is None else self.loop_spills} spill "
                f"instructions in loops), over the budget of {self.spill_budget}"
            )
        return found

    @property
    def spill_budget(self) -> int:
        wide = max(int(self.constexprs.get(dim, 0)) for dim in ("D_QK", "D_V"))
        return WIDE_HEAD_SPILL_BUDGET_BYTES if wide > 192 else SPILL_BUDGET_BYTES


@contextmanager
def _compiled_mode() -> Iterator[None]:
    """Pick the GPU tile configs (not the interpreter's) while recording."""
    previous = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "0"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = previous


def record_case(
    case: Case, tiles: Mapping[str, KernelConfig] | None = None
) -> list[RecordedLaunch]:
    """The launches of one forward + backward call, recorded on meta tensors;
    ``tiles`` replaces the named kernels' configs (``configs.tile_overrides``)."""
    from .backward import run_backward
    from .forward import run_forward

    meta = torch.device("meta")
    kv_len = (case.ttt_steps + 1) * case.n

    def tensor(*shape: int, dtype: torch.dtype = case.dtype) -> torch.Tensor:
        return torch.empty(*shape, dtype=dtype, device=meta)

    q = tensor(1, case.q_heads, case.n, case.head_dim)
    k = tensor(1, case.kv_heads, kv_len, case.head_dim)
    v = tensor(1, case.kv_heads, kv_len, case.d_v)
    layout = tensor(5, case.n, dtype=torch.int32)
    scale = case.head_dim**-0.5
    with (
        _compiled_mode(),
        tile_overrides(tiles or {}),
        recording_launches() as launches,
    ):
        o, lse = run_forward(q, k, v, layout, scale, case.window)
        run_backward(o, q, k, v, o, lse, layout, scale, case.window)
    return list(launches)


def _argument_type(value: Any) -> Any:
    if isinstance(value, tuple):
        return tuple(_argument_type(item) for item in value)
    if isinstance(value, torch.Tensor):
        return "*" + _TRITON_TYPES[value.dtype]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -(2**31) <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"cannot type kernel argument {value!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@contextmanager
def _triton_ptxas_log() -> Iterator[io.StringIO]:
    """Triton's own ``ptxas -v`` log of the kernels compiled inside: compiled
    afresh (not taken from Triton's cache, which keeps no log), with the flags
    Triton gives ``ptxas``, so the figures describe the cubin that launches."""
    import triton

    nvidia, compilation = triton.knobs.nvidia, triton.knobs.compilation
    saved = nvidia.dump_ptxas_log, compilation.always_compile
    log = io.StringIO()
    try:
        nvidia.dump_ptxas_log, compilation.always_compile = True, True
        with contextlib.redirect_stdout(log):
            yield log
    finally:
        nvidia.dump_ptxas_log, compilation.always_compile = saved


def _ptxas_resources(log: str) -> dict[str, int]:
    """Registers, spills and stack of the one entry a ``ptxas -v`` log reports."""

    def number(pattern: str) -> int:
        found = re.search(pattern, log)
        return int(found.group(1)) if found else 0

    if not re.search(r"Used \d+ registers", log):
        raise RuntimeError(
            "Triton printed no ptxas -v log (TRITON_DUMP_PTXAS_LOG): this Triton "
            "cannot report the resources of the cubin it builds"
        )
    return {
        "registers": number(r"Used (\d+) registers"),
        "spill_store_bytes": number(r"(\d+) bytes spill stores"),
        "spill_load_bytes": number(r"(\d+) bytes spill loads"),
        "stack_bytes": number(r"(\d+) bytes stack frame"),
    }


_SASS_LABEL = re.compile(r"^\s*\.(L_x_\d+):")
_SASS_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s*([^;]*);")
_SASS_BRANCH = re.compile(r"\bBRA\b.*?\b(L_x_\d+)\b")
_SASS_SPILL = re.compile(r"\b(?:STL|LDL)\b")


def loop_spills(sass: str) -> int:
    """Spill instructions (local-memory ``STL``/``LDL``) inside a loop of ``sass``
    (``nvdisasm -c`` text): a loop is the span from a label to a branch back to
    it; each instruction counts once, however many loops hold it."""
    labels: dict[str, int] = {}
    pending: list[str] = []
    instructions: list[tuple[int, str]] = []
    for line in sass.splitlines():
        label = _SASS_LABEL.match(line)
        if label:
            pending.append(label.group(1))
            continue
        found = _SASS_INSTRUCTION.match(line)
        if found:
            address = int(found.group(1), 16)
            instructions.append((address, found.group(2)))
            labels.update(dict.fromkeys(pending, address))
            pending.clear()
    loops = [
        (labels[branch.group(1)], address)
        for address, text in instructions
        if (branch := _SASS_BRANCH.search(text))
        and labels.get(branch.group(1), address) < address
    ]
    return sum(
        1
        for address, text in instructions
        if _SASS_SPILL.search(text)
        and any(start <= address <= end for start, end in loops)
    )


def _cubin_loop_spills(cubin: bytes) -> int | None:
    """``loop_spills`` of a cubin, disassembled with Triton's ``nvdisasm``."""
    import triton

    try:
        tool = triton.knobs.nvidia.nvdisasm
    except (AttributeError, RuntimeError):  # an older triton, or none bundled
        return None
    with tempfile.TemporaryDirectory() as tmp:
        binary = Path(tmp) / "kernel.cubin"
        binary.write_bytes(cubin)
        run = subprocess.run(
            [tool.path, "-c", str(binary)], capture_output=True, text=True, check=True
        )
    return loop_spills(run.stdout)


def compile_launch(
    launch: RecordedLaunch,
    arch: int,
    case: str = "",
    dtype: torch.dtype = torch.bfloat16,
) -> KernelBuild:
    """Compile one recorded launch (of inputs in ``dtype``) for ``sm_<arch>`` and
    report its resources."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    if not isinstance(triton.language.sum, JITFunction):
        raise RuntimeError(
            "triton was imported with TRITON_INTERPRET=1, so its own helpers "
            "(tl.sum, ...) are interpreter-only and cannot be compiled; run "
            "`python -m speculators_kimi.kernels.cross_compile` in a process "
            "without TRITON_INTERPRET."
        )
    fn = JITFunction(launch.fn)
    names = list(inspect.signature(launch.fn).parameters)
    options = {
        key: launch.kwargs[key] for key in _LAUNCH_OPTIONS if key in launch.kwargs
    }
    constexprs = {
        key: value for key, value in launch.kwargs.items() if key not in options
    }
    # Specialize as Triton's launcher does: integers equal to 1 become constants,
    # integers divisible by 16 and (aligned, as torch allocates) pointers carry
    # tt.divisibility=16, which is what lets loads vectorize.
    signature: dict[str, str] = {}
    attrs: dict[tuple[int, ...], list[list[Any]]] = {}
    for index, (name, value) in enumerate(zip(names, launch.args, strict=False)):
        if _is_int(value) and value == 1:
            constexprs[name] = 1
            continue
        signature[name] = _argument_type(value)
        members = value if isinstance(value, tuple) else (value,)
        for member, item in enumerate(members):
            if isinstance(item, torch.Tensor) or (_is_int(item) and item % 16 == 0):
                path = (index, member) if isinstance(value, tuple) else (index,)
                attrs[path] = [["tt.divisibility", 16]]
    signature.update(dict.fromkeys(constexprs, "constexpr"))
    signature = {name: signature[name] for name in names if name in signature}
    started = time.perf_counter()
    with _triton_ptxas_log() as log:
        compiled = triton.compile(
            ASTSource(fn, signature, constexprs, attrs),
            target=GPUTarget("cuda", arch, 32),
            options=options,
        )
    elapsed = time.perf_counter() - started
    ptx = compiled.asm["ptx"]
    return KernelBuild(
        case=case,
        kernel=launch.fn.__name__.strip("_"),
        dtype=str(dtype).removeprefix("torch."),
        constexprs={key: str(value) for key, value in constexprs.items()},
        num_warps=int(compiled.metadata.num_warps),
        num_stages=int(compiled.metadata.num_stages),
        shared_bytes=int(compiled.metadata.shared),
        compile_s=elapsed,
        wgmma=ptx.count("wgmma.mma_async"),
        mma_sync=ptx.count("mma.sync"),
        loop_spills=_cubin_loop_spills(compiled.asm["cubin"]),
        **_ptxas_resources(log.getvalue()),
    )


def build_case(
    case: Case, arch: int = 90, tiles: Mapping[str, KernelConfig] | None = None
) -> list[KernelBuild]:
    """Compile every kernel one forward + backward call of ``case`` launches."""
    return [
        compile_launch(launch, arch, case.name, case.dtype)
        for launch in record_case(case, tiles)
    ]


DEFAULT_CASES: tuple[Case, ...] = tuple(
    Case(d, dtype, q_heads=hq, kv_heads=hkv, window=window, v_head_dim=d_v)
    for d, d_v, hq, hkv, window in (
        (128, None, 64, 64, None),  # Kimi-K2.5's Llama-style draft
        (192, 128, 64, 64, None),  # Kimi-K2.5's MLA draft (nope 128 + rope 64)
        (128, None, 32, 8, None),  # Llama-style GQA
        (128, None, 32, 8, 2048),
        (64, None, 32, 8, None),
        (256, None, 16, 8, None),
    )
    for dtype in (torch.bfloat16, torch.float16, torch.float32)
)


def main(argv: Sequence[str] | None = None) -> int:
    """Compile the default cases; print a table; exit 1 if one cannot launch."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", type=int, default=90, help="compute capability")
    parser.add_argument("--json", type=Path, default=None, help="write the report")
    parser.add_argument(
        "--only",
        action="append",
        default=None,
        help="compile only cases whose name contains this (repeatable)",
    )
    parser.add_argument(
        "--tile",
        action="append",
        default=[],
        metavar="KERNEL=BMxBNxWxS",
        help="compile KERNEL with this config instead of the table's, in every "
        "case (repeatable; e.g. dkv0=32x128x8x2): a sweep candidate's resources",
    )
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="parallel compiles"
    )
    args = parser.parse_args(argv)
    tiles: dict[str, KernelConfig] = {}
    for spec in args.tile:
        try:
            kernel, configs = parse_tiles(spec)
        except ValueError as exc:
            parser.error(f"--tile {exc}")
        if len(configs) != 1:
            parser.error(f"--tile {spec!r}: one config per kernel")
        tiles[kernel] = configs[0]
    cases = [
        case
        for case in DEFAULT_CASES
        if args.only is None or any(part in case.name for part in args.only)
    ]
    builds: list[KernelBuild] = []
    print(
        f"{'case':28} {'kernel':16} {'warps':>5} {'stages':>6} {'smem':>7} "
        f"{'regs':>4} {'spill':>6} {'in loop':>7} {'wgmma':>5} {'mma.sync':>8}"
    )
    with concurrent.futures.ProcessPoolExecutor(args.jobs) as pool:
        for case_builds in pool.map(
            build_case, cases, [args.arch] * len(cases), [tiles] * len(cases)
        ):
            for build in case_builds:
                builds.append(build)
                print(
                    f"{build.case:28} {build.kernel:16} {build.num_warps:5d} "
                    f"{build.num_stages:6d} {build.shared_bytes:7d} "
                    f"{build.registers:4d} {build.spill_store_bytes:6d} "
                    f"{'?' if build.loop_spills is None else build.loop_spills:>7} "
                    f"{build.wgmma:5d} {build.mma_sync:8d}",
                    flush=True,
                )
    problems = [p for build in builds for p in build.problems(args.arch)]
    if args.json is not None:
        import triton

        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "what": "static resources of the draft-attention kernels compiled "
                    f"for sm_{args.arch} without a GPU (not a performance figure)",
                    "arch": args.arch,
                    "triton": triton.__version__,
                    "tiles": {kernel: list(c) for kernel, c in tiles.items()},
                    "torch": torch.__version__,
                    "builds": [dataclasses.asdict(build) for build in builds],
                    "problems": problems,
                },
                indent=2,
            )
            + "\n"
        )
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
