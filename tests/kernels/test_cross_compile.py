"""The kernels compile for the H200 (sm_90) on a machine without a GPU.

``cross_compile`` records the launches the real launchers make (on meta tensors)
and compiles each with Triton and its bundled ptxas for sm_90. A kernel that does
not build, needs more shared memory than sm_90 has, or spills registers at the
16-bit configurations used for training fails here, before any GPU is lent.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("triton.backends.nvidia.compiler")

from speculators_kimi.kernels.configs import parse_tiles, pick_blocks
from speculators_kimi.kernels.cross_compile import (
    DOT_KERNELS,
    SHARED_MEMORY_LIMIT,
    SPILL_BUDGET_BYTES,
    Case,
    KernelBuild,
    loop_spills,
    record_case,
)

KIMI = Case(head_dim=128, dtype=torch.bfloat16, q_heads=64, kv_heads=64, n=8192)


def test_records_the_launches_of_forward_and_backward():
    launches = record_case(KIMI)
    names = [launch.fn.__name__ for launch in launches]
    assert names == ["_fwd_kernel", "_diag_kernel", "_dq_kernel", "_dkv0_kernel"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITON_INTERPRET", "0")
        configs = {
            kernel: pick_blocks(128, 128, torch.bfloat16, kernel)
            for kernel in ("fwd", "dq", "dkv0", "diag")
        }
    fwd, diag, dq, dkv0 = launches
    assert fwd.kwargs["BLOCK_M"] == configs["fwd"][0]
    assert fwd.kwargs["num_warps"] == configs["fwd"][2]
    assert fwd.grid == (64, 8192 // configs["fwd"][0])
    assert dq.kwargs["BLOCK_M"] == configs["dq"][0]
    # the diagonal kernel's tile holds rows x steps (3 steps: padded to 4)
    assert diag.kwargs["BLOCK_M"] * diag.kwargs["STEPS"] == configs["diag"][0]
    # heaviest first: tile index on the slow grid axis, heads on the fast one
    assert dkv0.grid == (64, 8192 // configs["dkv0"][1])
    assert fwd.kwargs["GROUP"] == 1 and fwd.kwargs["HAS_WINDOW"] is False
    assert fwd.kwargs["NUM_BLOCKS"] == 4  # block 0 + 3 TTT steps: a constexpr


def test_records_a_candidate_tile_in_place_of_the_tables():
    """``--tile dkv0=32x128x8x2``: a sweep candidate compiled as a GPU run would
    launch it, the other kernels on their table configs."""
    default = record_case(KIMI)
    launches = record_case(KIMI, {"dkv0": (32, 128, 8, 2)})
    dkv0 = launches[3].kwargs
    assert (dkv0["BLOCK_M"], dkv0["BLOCK_N"]) == (32, 128)
    assert (dkv0["num_warps"], dkv0["num_stages"]) == (8, 2)
    assert launches[3].grid == (64, 8192 // 128)
    assert [launch.kwargs for launch in launches[:3]] == [
        launch.kwargs for launch in default[:3]
    ]
    assert record_case(KIMI)[3].kwargs == default[3].kwargs  # the override ended


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        ("dkv0=32x128x8x2", ("dkv0", [(32, 128, 8, 2)])),
        ("fwd=128x64x8x3,64x64x4x3", ("fwd", [(128, 64, 8, 3), (64, 64, 4, 3)])),
        ("dkv=32x128x8x2", "unknown kernel 'dkv'"),
        ("dq=32x128x8", "'32x128x8' is not BLOCK_MxBLOCK_NxWARPSxSTAGES"),
        ("dq=32x128x8xtwo", "is not BLOCK_MxBLOCK_NxWARPSxSTAGES"),
    ],
)
def test_parse_tiles(spec, parsed):
    if isinstance(parsed, str):
        with pytest.raises(ValueError, match=parsed):
            parse_tiles(spec)
    else:
        assert parse_tiles(spec) == parsed


def test_long_sequences_stay_within_cudas_grid():
    """CUDA takes at most 65535 programs on grid axes 1 and 2; the diagonal
    kernel's row tiles (2-4 rows at 7 steps) go on axis 0, so 256k tokens launch."""
    long = Case(head_dim=256, dtype=torch.bfloat16, q_heads=8, kv_heads=8, n=2**18)
    for launch in record_case(dataclasses.replace(long, ttt_steps=7)):
        assert all(size <= 65535 for size in launch.grid[1:]), launch.grid


# Kimi-K2.5's two draft geometries (Llama-style; MLA: q/k 192, v 128), a GQA one
# with a window, and head dim 64 and 256.
CASES = [
    "bfloat16-d128-h64x64",
    "bfloat16-d192v128-h64x64",
    "float16-d128-h32x8-w2048",
    "bfloat16-d64-h32x8",
]
CASES_16BIT_D256 = "bfloat16-d256-h16x8"


@pytest.fixture(scope="module")
def sm90_report(tmp_path_factory) -> dict:
    """Compile the cases in a fresh process: triton's own helpers are only
    compilable when triton was imported without TRITON_INTERPRET (which the
    kernel tests' conftest sets)."""
    out = tmp_path_factory.mktemp("sm90") / "report.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    only = [arg for case in (*CASES, CASES_16BIT_D256) for arg in ("--only", case)]
    proc = subprocess.run(
        [sys.executable, "-m", "speculators_kimi.kernels.cross_compile"]
        + ["--arch", "90", "--json", str(out), *only],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())


@pytest.mark.parametrize("case", [*CASES, CASES_16BIT_D256])
def test_compiles_for_sm90_within_shared_memory(sm90_report, case):
    builds = [b for b in sm90_report["builds"] if b["case"] == case]
    kernels = [b["kernel"] for b in builds]
    assert kernels == ["fwd_kernel", "diag_kernel", "dq_kernel", "dkv0_kernel"]
    assert sm90_report["problems"] == []
    for build in builds:
        assert 0 <= build["shared_bytes"] <= SHARED_MEMORY_LIMIT[90], build
        assert 0 < build["registers"] <= 255, build


@pytest.mark.parametrize("case", [*CASES, CASES_16BIT_D256])
def test_block0_dots_run_on_hopper_tensor_cores(sm90_report, case):
    """What makes the kernels fast on an H200: every block-0 dot of the forward,
    dQ and dK/dV kernels is a warpgroup MMA (``wgmma``), none the Ampere
    ``mma.sync`` that a 32 x 32 dK/dV tile fell back to (0.34x flex). Spills stay
    within the budget; the diagonal kernel is element-wise (no MMA)."""
    builds = {b["kernel"]: b for b in sm90_report["builds"] if b["case"] == case}
    for kernel in DOT_KERNELS:
        assert builds[kernel]["wgmma"] > 0, builds[kernel]
        assert builds[kernel]["mma_sync"] == 0, builds[kernel]
    budget = SPILL_BUDGET_BYTES if case != CASES_16BIT_D256 else 2048
    for build in builds.values():
        # where the spills are, from the SASS of the cubin Triton launches (and
        # its ptxas log): none in a loop without spill bytes
        assert isinstance(build["loop_spills"], int), build
        assert build["spill_store_bytes"] or build["loop_spills"] == 0, build
        spilled = max(build["spill_store_bytes"], build["spill_load_bytes"])
        assert spilled <= budget or build["loop_spills"] == 0, build
    assert builds["diag_kernel"]["wgmma"] == builds["diag_kernel"]["mma_sync"] == 0


def test_mla_case_splits_its_head_for_the_dots():
    """MLA's q/k 192 is held as 128 + 64 columns (two dots, both wgmma shapes),
    not padded to 256; its v stays 128; the element-wise diagonal pads."""
    mla = Case(head_dim=192, dtype=torch.bfloat16, v_head_dim=128)
    assert mla.name == "bfloat16-d192v128-h64x64"
    fwd, diag, dq, dkv0 = record_case(mla)
    for launch in (fwd, dq, dkv0):
        assert (launch.kwargs["D_QK"], launch.kwargs["D_V"]) == (192, 128)
        kw = launch.kwargs
        assert (kw["BLOCK_QK"], kw["BLOCK_QK2"], kw["SPLIT"]) == (128, 64, True)
        assert launch.kwargs["BLOCK_V"] == 128
    assert (diag.kwargs["BLOCK_QK"], diag.kwargs["BLOCK_V"]) == (256, 128)


def test_cross_compile_refuses_an_interpreter_imported_triton():
    """Triton imported with TRITON_INTERPRET=1 cannot compile: a clear error."""
    code = (
        "import torch\n"
        "from speculators_kimi.kernels.cross_compile import Case, compile_launch,"
        " record_case\n"
        "launch = record_case(Case(head_dim=64, dtype=torch.float16, n=256))[0]\n"
        "compile_launch(launch, 90)\n"
    )
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert "RuntimeError" in proc.stderr and "TRITON_INTERPRET" in proc.stderr


#: A kernel build that fits and does not spill; tests change one thing.
FITS = KernelBuild(
    case="c",
    kernel="fwd_kernel",
    dtype="bfloat16",
    constexprs={},
    num_warps=8,
    num_stages=2,
    shared_bytes=1024,
    registers=128,
    spill_store_bytes=0,
    spill_load_bytes=0,
    stack_bytes=0,
    compile_s=0.0,
    wgmma=8,
    mma_sync=0,
)


def test_shared_memory_over_the_limit_is_a_problem():
    assert FITS.problems(90) == []
    build = dataclasses.replace(FITS, shared_bytes=SHARED_MEMORY_LIMIT[90] + 1)
    assert build.problems(90) and "sm_90 allows 232448" in build.problems(90)[0]
    assert build.problems(80)  # smaller on A100


def test_spills_past_the_budget_in_a_loop_at_16_bit_are_a_problem():
    small = dataclasses.replace(
        FITS, spill_store_bytes=64, spill_load_bytes=64, loop_spills=4
    )
    assert small.problems(90) == []  # reported in the table, within budget
    over = SPILL_BUDGET_BYTES + 8
    build = dataclasses.replace(small, spill_store_bytes=over, spill_load_bytes=over)
    assert f"spills {over} bytes" in build.problems(90)[0]
    assert "4 spill instructions in loops" in build.problems(90)[0]
    # where nvdisasm could not tell, the spill counts as in a loop
    unknown = dataclasses.replace(build, loop_spills=None)
    assert "? spill instructions in loops" in unknown.problems(90)[0]
    # outside every loop it is paid once per program: reported, not refused
    assert dataclasses.replace(build, loop_spills=0).problems(90) == []
    fp32 = dataclasses.replace(build, dtype="float32")
    assert fp32.problems(90) == []  # IEEE correctness configs: reported only


def test_mma_sync_in_a_block0_kernel_is_a_problem_on_hopper():
    ampere = dataclasses.replace(FITS, wgmma=0, mma_sync=144, kernel="dkv0_kernel")
    assert "144 mma.sync" in ampere.problems(90)[0]
    assert ampere.problems(80) == []  # sm_80 has no wgmma: mma.sync is its MMA
    mixed = dataclasses.replace(FITS, wgmma=8, mma_sync=4, kernel="dq_kernel")
    assert mixed.problems(90)
    diag = dataclasses.replace(FITS, wgmma=0, mma_sync=0, kernel="diag_kernel")
    assert diag.problems(90) == []  # element-wise: no MMA expected


# ``nvdisasm -c`` text: an outer loop (.L_x_1 .. 0x0090) holding an inner one
# (.L_x_2 .. 0x0070), a forward branch (not a loop) and the trap's self-branch.
SASS = """
        /*0000*/                   STL [R1+0x3c], R16 ;
        /*0010*/              @!P1 BRA `(.L_x_0) ;
.L_x_1:
        /*0020*/                   LDL.LU R8, [R1+0x3c] ;
.L_x_2:
        /*0030*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24 ;
        /*0040*/                   STL [R1+0x40], R9 ;
        /*0050*/                   LDL R9, [R1+0x40] ;
        /*0060*/                   ISETP.GE.AND P0, PT, R2, R3, PT ;
        /*0070*/               @P0 BRA `(.L_x_2) ;
        /*0080*/                   STL.64 [R1+0x8], R10 ;
        /*0090*/               @P1 BRA.U `(.L_x_1) ;
.L_x_0:
        /*00a0*/                   LDL.LU R8, [R1+0x3c] ;
.L_x_3:
        /*00b0*/                   BRA `(.L_x_3);
"""


@pytest.mark.parametrize(
    ("sass", "expected"),
    [
        (SASS, 4),  # 0x20, 0x40, 0x50 (both loops: once), 0x80
        (SASS.replace("@P0 BRA `(.L_x_2)", "@P0 BRA `(.L_x_0)"), 4),  # forward
        (SASS.replace("@P1 BRA.U `(.L_x_1)", "NOP"), 2),  # the inner loop only
        (SASS.replace("STL", "STG").replace("LDL", "LDG"), 0),  # global, not spill
        ("", 0),
    ],
)
def test_loop_spills_counts_local_memory_inside_loops(sass, expected):
    """The costly spills are the ones a loop repeats per key tile: the forward's
    spill at d=128 sits after its loops (once per program), MLA dK/dV's inside."""
    assert loop_spills(sass) == expected
