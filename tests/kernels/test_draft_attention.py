"""Triton draft-head TTT attention vs the fp64 dense reference.

On CPU through the Triton interpreter; on a GPU with SPECULATORS_KIMI_KERNEL_DEVICE=cuda
(kernel_device.py), where the ``gpu_only`` cases add real sizes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from kernel_device import DEVICE, ON_GPU, gpu_only, interpreter_only

from speculators_kimi.kernels import (
    document_layout,
    draft_attention,
    draft_attention_mask,
    draft_attention_reference,
)

ROOT = Path(__file__).resolve().parents[2]

# per-dtype (output, gradient) max-abs tolerances vs the fp64 reference; inputs are
# bounded (uniform(-1, 1)), so probabilities and values are O(1).
TOL = {
    torch.float32: (1e-4, 1e-4),
    torch.float16: (2e-2, 2e-2),
    torch.bfloat16: (5e-2, 5e-2),
}


def make_docs(n: int, num_docs: int, pad_tail: int = 0, interior_pad: bool = False):
    """Packed document ids: ``num_docs`` contiguous documents of uneven lengths,
    ``pad_tail`` trailing padding tokens (-1) and optionally one interior -1."""
    body = n - pad_tail
    ids = torch.full((n,), -1, dtype=torch.long)
    g = torch.Generator().manual_seed(n * 31 + num_docs)
    cuts = sorted(torch.randperm(body - 1, generator=g)[: num_docs - 1].add(1).tolist())
    edges = [0, *cuts, body]
    for doc, (a, b) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
        ids[a:b] = doc
    if interior_pad and body > 4:
        ids[body // 2] = -1
    return ids


def make_inputs(b, hq, hkv, n, t, d, dtype, seed=0, device=DEVICE, dv=None):
    """q, k ``[..., d]``, v and dO ``[..., dv]`` (``dv`` defaults to ``d``)."""
    g = torch.Generator().manual_seed(seed)
    dv = d if dv is None else dv

    def u(*shape):
        x = torch.rand(*shape, generator=g, dtype=torch.float64) * 2 - 1
        return x.to(device=device, dtype=dtype)

    q = u(b, hq, n, d)
    k = u(b, hkv, (t + 1) * n, d)
    v = u(b, hkv, (t + 1) * n, dv)
    do = u(b, hq, n, dv)
    return q, k, v, do


def check(
    n,
    t,
    hq,
    hkv,
    d,
    window,
    dtype,
    num_docs=3,
    pad_tail=5,
    interior_pad=True,
    b=1,
    docs=None,
    backward=True,
    dv=None,
    scale=None,
):
    if docs is None:
        docs = make_docs(n, num_docs, pad_tail, interior_pad)
    docs = docs.to(DEVICE)
    q, k, v, do = make_inputs(b, hq, hkv, n, t, d, dtype, seed=n + 7 * t + d, dv=dv)
    ins = [x.clone().requires_grad_(backward) for x in (q, k, v)]
    out = draft_attention(*ins, docs, sliding_window=window, scale=scale)
    assert out.dtype == dtype and out.shape == do.shape
    refs = [x.double().requires_grad_(backward) for x in (q, k, v)]
    ref = draft_attention_reference(
        refs[0], refs[1], refs[2], docs, sliding_window=window, scale=scale
    )
    tol_o, tol_g = TOL[dtype]
    torch.testing.assert_close(out.double(), ref, atol=tol_o, rtol=0)
    if not backward:
        return
    out.backward(do)
    ref.backward(do.double())
    for name, a, r in zip("qkv", ins, refs, strict=True):
        assert a.grad is not None and a.grad.dtype == dtype, name

        def msg(m: str, nm: str = name) -> str:
            return f"d{nm}: {m}"

        torch.testing.assert_close(a.grad.double(), r.grad, atol=tol_g, rtol=0, msg=msg)


# (N, t, Hq, Hkv, d, window, num_docs)
FP32_CASES = [
    (33, 0, 1, 1, 16, None, 1),
    (33, 2, 2, 1, 32, None, 2),
    (64, 1, 4, 1, 16, None, 4),
    (64, 4, 2, 2, 64, 17, 3),
    (127, 0, 4, 2, 32, 17, 6),
    (127, 3, 2, 1, 16, None, 5),
    (200, 2, 4, 4, 16, None, 1),
    (200, 1, 2, 2, 128, 17, 2),
    (300, 4, 2, 1, 16, None, 6),
    (300, 1, 4, 1, 32, 17, 3),
    (96, 2, 2, 2, 128, None, 3),
    (70, 1, 2, 1, 256, 17, 2),
]


def _id(case):
    n, t, hq, hkv, d, w, nd = case
    return f"N{n}-t{t}-h{hq}x{hkv}-d{d}-w{w}-docs{nd}"


def _dtype_params(cases):
    """``(dtype, case)`` parameters, each named by its dtype and case."""
    return [
        pytest.param(dt, c, id=f"{str(dt).split('.')[-1]}-{_id(c)}") for dt, c in cases
    ]


@pytest.mark.parametrize("case", FP32_CASES, ids=[_id(c) for c in FP32_CASES])
def test_fp32_forward_backward(case):
    n, t, hq, hkv, d, w, nd = case
    check(n, t, hq, hkv, d, w, torch.float32, num_docs=nd)


LOWP_CASES = [
    (torch.float16, (64, 2, 2, 1, 32, None, 3)),
    (torch.float16, (127, 1, 4, 2, 64, 17, 4)),
    (torch.bfloat16, (64, 3, 4, 2, 32, None, 2)),
    (torch.bfloat16, (200, 1, 2, 1, 16, 17, 5)),
]


@pytest.mark.parametrize(("dtype", "case"), _dtype_params(LOWP_CASES))
def test_low_precision_forward_backward(dtype, case):
    n, t, hq, hkv, d, w, nd = case
    check(n, t, hq, hkv, d, w, dtype, num_docs=nd)


# Multi-head latent attention (DeepSeek-V3 / Kimi-K2.5 drafts): q/k heads wider than
# v heads (192/128 at Kimi-K2.5 size; 24/16 here, as qk_nope 16 + qk_rope 8), with
# a YaRN-like softmax scale passed in. (N, t, Hq, Hkv, d_qk, d_v, window, docs,
# scale); t = 0 and 2 are 1 and 3 TTT steps.
MLA_CASES = [
    (96, 0, 2, 2, 24, 16, None, 1, None),
    (96, 2, 4, 2, 24, 16, None, 3, 0.3),
    (130, 2, 4, 1, 24, 16, 17, 4, 0.3),
    (70, 1, 2, 2, 40, 24, None, 2, None),
    (64, 2, 2, 2, 16, 32, 9, 2, None),
]


@pytest.mark.parametrize(
    "case",
    MLA_CASES,
    ids=[
        f"N{c[0]}-t{c[1]}-h{c[2]}x{c[3]}-qk{c[4]}-v{c[5]}-w{c[6]}-docs{c[7]}"
        for c in MLA_CASES
    ],
)
def test_mla_head_dims_forward_backward(case):
    n, t, hq, hkv, d_qk, d_v, w, nd, scale = case
    check(n, t, hq, hkv, d_qk, w, torch.float32, num_docs=nd, dv=d_v, scale=scale)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_mla_head_dims_low_precision(dtype):
    check(64, 2, 4, 2, 24, None, dtype, num_docs=2, dv=16, scale=0.3)


@interpreter_only
@pytest.mark.parametrize(
    "blocks", [(32, 32), (32, 16), (16, 32)], ids=["m32n32", "m32n16", "m16n32"]
)
def test_small_and_unequal_tiles(monkeypatch, blocks):
    """Many tiles per document, and BLOCK_M != BLOCK_N (as used for d=256 on GPU)."""
    from speculators_kimi.kernels import configs

    monkeypatch.setattr(configs, "INTERPRETER_BLOCKS", blocks)
    check(100, 2, 2, 1, 16, None, torch.float32, num_docs=3)
    check(77, 1, 2, 2, 16, 17, torch.float32, num_docs=2)
    check(90, 2, 2, 1, 24, 17, torch.float32, num_docs=3, dv=16)
    # an id that comes back after another document: its tiles are edge tiles
    check(NON_CONTIGUOUS.numel(), 1, 2, 1, 16, None, torch.float32, docs=NON_CONTIGUOUS)


@interpreter_only
def test_interior_tiles_skip_the_mask(monkeypatch):
    """Only block-0 tiles on the diagonal evaluate the per-element mask when
    nothing else (document start, padding, window) cuts through a tile: one
    document of 8 tiles of 64 has 36 block-0 tiles per kernel, 8 of them masked."""
    from triton.runtime.interpreter import InterpretedFunction

    from speculators_kimi.kernels import backward, configs, tiles

    monkeypatch.setattr(configs, "INTERPRETER_BLOCKS", (64, 64))
    real = tiles.allowed
    if not isinstance(real, InterpretedFunction):
        real = InterpretedFunction(real.fn)
    masked_tiles = []

    def counting_allowed(rows, cols, doc_rows, doc_cols, window, has_window):
        masked_tiles.append(1)
        return real(rows, cols, doc_rows, doc_cols, window, has_window)

    monkeypatch.setattr(tiles, "allowed", counting_allowed)  # forward, dQ
    monkeypatch.setattr(backward, "allowed", counting_allowed)  # dK/dV
    docs = torch.zeros(512, dtype=torch.long)
    check(512, 1, 1, 1, 16, None, torch.float32, docs=docs, backward=False)
    assert len(masked_tiles) == 8
    masked_tiles.clear()
    check(512, 1, 1, 1, 16, None, torch.float32, docs=docs)
    assert len(masked_tiles) == 3 * 8  # forward, dQ, dK/dV
    # a document start inside tile 3 and a window of 100 cut more tiles
    masked_tiles.clear()
    docs[200:] = 1
    check(512, 1, 1, 1, 16, 100, torch.float32, docs=docs, backward=False)
    assert 8 < len(masked_tiles) < 36


@pytest.mark.parametrize("t", range(8), ids=[f"t{t}" for t in range(8)])
def test_every_unrolled_step_count(t):
    """The step count is a compile-time constant: each of 1..8 blocks is its own
    unrolled kernel, and the diagonal kernel pads the steps to a power of two
    (t = 3, 5, 6, 7 have masked step slots)."""
    check(40, t, 2, 1, 16, None, torch.float32, num_docs=2, pad_tail=3)


@interpreter_only
def test_shipped_hopper_tiles(monkeypatch):
    """The tiles the GPU runs (fwd/dQ 128 x 64, dK/dV 64 queries x 128 keys, the
    diagonal's rows x steps), under the interpreter: documents, padding and a
    window cutting the two-stage loops, a GQA fold and a split q/k head."""
    from speculators_kimi.kernels import configs

    with monkeypatch.context() as patch:
        patch.setenv("TRITON_INTERPRET", "0")
        shipped = {
            kernel: configs.pick_blocks(128, 128, torch.bfloat16, kernel)
            for kernel in configs.KERNELS
        }
    assert shipped["dkv0"][:2] == (64, 128) and shipped["dq"][:2] == (128, 64)
    with configs.tile_overrides(shipped):
        check(300, 2, 4, 2, 16, 37, torch.float32, num_docs=4)
        check(260, 1, 2, 1, 40, None, torch.float32, num_docs=3, dv=24, scale=0.3)


def test_same_bits_on_two_runs():
    """No atomics: the GQA fold of dK/dV sums the group's heads in order, the
    diagonal kernel owns its rows, so two runs give the same bits (on a GPU too,
    where programs race)."""
    n, t, hq, hkv, d = (1000, 3, 8, 2, 128) if ON_GPU else (100, 2, 4, 2, 32)
    dtype = torch.bfloat16 if ON_GPU else torch.float32
    docs = make_docs(n, 3, pad_tail=4, interior_pad=True).to(DEVICE)
    q, k, v, do = make_inputs(1, hq, hkv, n, t, d, dtype, seed=5)
    runs = []
    for _ in range(2):
        ins = [x.clone().requires_grad_(True) for x in (q, k, v)]
        out = draft_attention(*ins, docs, sliding_window=n // 3)
        out.backward(do)
        runs.append([out, *(x.grad for x in ins)])
    for first, second in zip(*runs, strict=True):
        assert torch.equal(first, second)


def test_large_n_2048():
    """One long case: several tiles per document, two TTT blocks."""
    check(2048, 1, 1, 1, 16, None, torch.float32, num_docs=8, pad_tail=37)


@pytest.mark.parametrize("t", [0, 2], ids=["t0", "t2"])
def test_no_padding_single_document(t):
    docs = torch.zeros(100, dtype=torch.long)
    check(100, t, 2, 1, 16, None, torch.float32, docs=docs)


def test_all_padding():
    docs = torch.full((40,), -1, dtype=torch.long)
    check(40, 2, 2, 1, 16, None, torch.float32, docs=docs)


NON_CONTIGUOUS = torch.tensor([0] * 20 + [1] * 15 + [0] * 25 + [-1] * 3 + [2] * 10)


def test_non_contiguous_document_ids():
    """Same id in two separate runs: upstream's mask lets them see each other."""
    docs = NON_CONTIGUOUS
    check(docs.numel(), 1, 2, 2, 16, None, torch.float32, docs=docs)
    check(docs.numel(), 1, 2, 2, 16, 9, torch.float32, docs=docs, backward=False)


def test_batch_of_two():
    check(70, 1, 2, 1, 16, 17, torch.float32, b=2)


def test_window_one_and_odd_head_dim():
    check(50, 1, 2, 1, 16, 1, torch.float32, backward=False)
    check(50, 1, 2, 1, 24, None, torch.float32)


def test_a_window_past_the_sequence_is_no_window():
    """A window of N or more keeps every block-0 key, as none does; one near
    2**31 (a "no window" sentinel) used to overflow the int32 key bounds of
    dK/dV."""
    check(103, 1, 2, 1, 16, 2**31 - 1, torch.float32)  # several key tiles
    check(40, 1, 2, 1, 16, 40, torch.float32, backward=False)


@pytest.mark.parametrize(
    ("window", "error"),
    [(17.0, TypeError), ("17", TypeError), (0, ValueError)],
)
def test_a_window_that_is_not_a_positive_integer_is_refused(window, error):
    q, k, v, _ = make_inputs(1, 1, 1, 8, 0, 16, torch.float32)
    with pytest.raises(error, match="sliding_window must be"):
        draft_attention(
            q, k, v, torch.zeros(8, dtype=torch.long), sliding_window=window
        )


def test_document_ids_past_int32_are_refused():
    """The layout holds ids as int32: 2**32 would alias document 0."""
    with pytest.raises(ValueError, match=r"fit in int32.*0\.\.4294967296"):
        document_layout(torch.tensor([0, 0, 2**32, 2**32]))
    assert document_layout(torch.tensor([-1, 2**31 - 1]))[0].tolist() == [-1, 2**31 - 1]


def test_precomputed_layout_and_scale():
    n, t = 90, 2
    docs = make_docs(n, 3, 4, True).to(DEVICE)
    q, k, v, _ = make_inputs(1, 2, 1, n, t, 32, torch.float32)
    out = draft_attention(q, k, v, docs, scale=0.3, layout=document_layout(docs))
    ref = draft_attention_reference(q.double(), k.double(), v.double(), docs, scale=0.3)
    torch.testing.assert_close(out.double(), ref, atol=1e-4, rtol=0)


def test_autocast_casts_mixed_inputs_as_for_sdpa():
    """Under autocast an MLA layer hands over fp32 keys and bf16 values; like
    sdpa, the kernels then take every input in the autocast dtype."""
    n, d_qk, d_v = 48, 24, 16
    docs = make_docs(n, 2, 3, False).to(DEVICE)
    q, k, v, do = make_inputs(1, 2, 2, n, 1, d_qk, torch.float32, dv=d_v)
    v = v.to(torch.bfloat16)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
        out = draft_attention(*leaves, docs)
    assert out.dtype == torch.bfloat16
    out.backward(do.to(torch.bfloat16))
    assert [x.grad.dtype for x in leaves] == [
        torch.float32,
        torch.float32,
        torch.bfloat16,
    ]
    rounded = [x.to(torch.bfloat16).double() for x in (q, k, v)]
    ref = draft_attention_reference(rounded[0], rounded[1], rounded[2], docs)
    torch.testing.assert_close(out.double(), ref, atol=TOL[torch.bfloat16][0], rtol=0)
    with pytest.raises(TypeError, match="share a dtype"):
        draft_attention(q, k, v, docs)  # without autocast: refused


def test_strided_inputs():
    """q/k/v as transposed views of [B, L, H, d] projections (as the model has them)."""
    n, t, hq, hkv, d = 45, 1, 2, 1, 16
    docs = make_docs(n, 2, 3, False).to(DEVICE)
    q, k, v, _ = make_inputs(1, hq, hkv, n, t, d, torch.float32)
    qs = q.transpose(1, 2).contiguous().transpose(1, 2)
    ks = k.transpose(1, 2).contiguous().transpose(1, 2)
    vs = v.transpose(1, 2).contiguous().transpose(1, 2)
    out = draft_attention(qs, ks, vs, docs)
    ref = draft_attention_reference(q.double(), k.double(), v.double(), docs)
    torch.testing.assert_close(out.double(), ref, atol=1e-4, rtol=0)


def test_ttt_loop_gradients_accumulate():
    """A 3-step TTT loop where k/v grow by concatenation, as with the DynamicCache."""
    n, hq, hkv, d = 48, 2, 1, 16
    docs = make_docs(n, 2, 3, True).to(DEVICE)
    g = torch.Generator().manual_seed(3)

    def u(*shape):
        return (torch.rand(*shape, generator=g) * 2 - 1).to(DEVICE)

    ks = [u(1, hkv, n, d) for _ in range(3)]
    vs = [u(1, hkv, n, d) for _ in range(3)]
    qs = [u(1, hq, n, d) for _ in range(3)]

    def loop(fn, dtype):
        leaves = [x.detach().to(dtype).requires_grad_() for x in (*qs, *ks, *vs)]
        total = None
        for step in range(3):
            k = torch.cat(leaves[3 : 4 + step], dim=2)
            v = torch.cat(leaves[6 : 7 + step], dim=2)
            term = (fn(leaves[step], k, v, docs) ** 2).sum()
            total = term if total is None else total + term
        assert total is not None
        total.backward()
        return [x.grad for x in leaves]

    ours = loop(draft_attention, torch.float32)
    ref = loop(draft_attention_reference, torch.float64)
    for a, r in zip(ours, ref, strict=True):
        torch.testing.assert_close(a.double(), r, atol=2e-4, rtol=0)


def test_reference_matches_upstream_dense_mask():
    """The reference equals sdpa with the mask upstream's sdpa/eager paths build."""
    pytest.importorskip("speculators")
    from speculators.models.attention import create_float_mask
    from speculators.models.eagle3.attention import (
        create_combined_mask_mod,
        extend_dense_mask_for_draft_tokens,
    )

    n, t, hq, hkv, d = 77, 2, 4, 2, 16
    docs = make_docs(n, 3, 6, True)
    q, k, v, _ = make_inputs(1, hq, hkv, n, t, d, torch.float64, device="cpu")
    for window in (None, 17):
        mask_mod = create_combined_mask_mod(docs, n, sliding_window=window)
        float_mask = create_float_mask(
            mask_mod, None, None, n, n, device="cpu", dtype=torch.float64
        )
        for _ in range(t):
            float_mask = extend_dense_mask_for_draft_tokens(float_mask, n)
        bool_mask = float_mask[0, 0] == 0
        assert torch.equal(bool_mask, draft_attention_mask(docs, t + 1, window))
        g = hq // hkv
        kk, vv = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        upstream = torch.nn.functional.scaled_dot_product_attention(
            q, kk, vv, attn_mask=float_mask
        )
        ref = draft_attention_reference(q, k, v, docs, sliding_window=window)
        torch.testing.assert_close(ref, upstream, atol=1e-12, rtol=0)


def test_document_layout():
    docs = torch.tensor([0, 0, 0, 1, 1, -1, 2, -1, -1, 0])
    layout = document_layout(docs)
    assert layout.dtype == torch.int32 and layout.shape == (5, 10)
    ids, starts, ends, run_starts, run_ends = layout.tolist()
    assert ids == docs.tolist()
    # the id's first and one-past-last position (id 0 comes back at 9)
    assert starts == [0, 0, 0, 3, 3, 5, 6, 7, 8, 0]
    assert ends == [10, 10, 10, 5, 5, 6, 7, 8, 9, 10]
    # the contiguous run; each padding token is its own
    assert run_starts == [0, 0, 0, 3, 3, 5, 6, 7, 8, 9]
    assert run_ends == [3, 3, 3, 5, 5, 6, 7, 8, 9, 10]


def test_cpu_without_interpreter_names_working_backends(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    q, k, v, _ = make_inputs(1, 1, 1, 8, 0, 16, torch.float32, device="cpu")
    with pytest.raises(RuntimeError, match="sdpa.*eager"):
        draft_attention(q, k, v, torch.zeros(8, dtype=torch.long))


def test_input_validation():
    def zeros(n):
        return torch.zeros(n, dtype=torch.long, device=DEVICE)

    q, k, v, _ = make_inputs(1, 3, 2, 8, 0, 16, torch.float32)
    with pytest.raises(ValueError, match="multiple of Hkv"):
        draft_attention(q, k, v, zeros(8))
    q, k, v, _ = make_inputs(1, 2, 1, 8, 1, 16, torch.float32)
    with pytest.raises(ValueError, match="document_ids"):
        draft_attention(q, k, v, zeros(9))
    with pytest.raises(ValueError, match="multiple of N"):
        draft_attention(q, k[:, :, :-1], v[:, :, :-1], zeros(8))
    with pytest.raises(ValueError, match="k .* and v .* differ"):
        draft_attention(q, k, v[:, :, :8], zeros(8))
    q, k, v, _ = make_inputs(1, 2, 1, 8, 0, 16, torch.float32, dv=288)
    with pytest.raises(ValueError, match="v head dim 288 unsupported: .*1..256"):
        draft_attention(q, k, v, zeros(8))


@interpreter_only
def test_interpreter_enabled_after_triton_import():
    """TRITON_INTERPRET set after triton (and the kernels) were imported, as when
    other tests of the same pytest run import them first."""
    code = """
import os
import torch, triton
import speculators_kimi.kernels as K
assert not triton.knobs.runtime.interpret
os.environ["TRITON_INTERPRET"] = "1"
q = torch.rand(1, 2, 40, 16, requires_grad=True)
k = torch.rand(1, 1, 80, 16, requires_grad=True)
d = torch.zeros(40, dtype=torch.long)
o = K.draft_attention(q, k, k, d)
o.sum().backward()
r = K.draft_attention_reference(q.double(), k.double(), k.double(), d)
assert (o.double() - r).abs().max() < 1e-5
print("ok")
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout + proc.stderr


@interpreter_only
def test_benchmark_quick_smoke(tmp_path):
    out = tmp_path / "bench.json"
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "draft_attention.py"), "--quick"]
        + ["--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import json

    data = json.loads(out.read_text())
    assert data["device"]
    assert data["results"]
    assert any(r["impl"] == "triton" for r in data["results"])
    # the MLA shape (q/k 24, v 16) runs beside the Llama-style one, same impls
    mla = [r for r in data["results"] if (r["d"], r["dv"]) == (24, 16)]
    assert {r["impl"] for r in mla if "ms" in r} >= {"triton", "sdpa"}
    assert all(c.get("max_abs_diff_vs_sdpa", 1) < 1e-4 for c in data["configs"])


# Real sizes, compiled kernels, GPU tile configs: (N, t, Hq, Hkv, d, window, docs).
# Head counts are kept small where N is large so the fp64 dense reference fits.
GPU_CASES = [
    (torch.bfloat16, (1024, 3, 64, 64, 128, None, 4)),  # Kimi-K2.5 draft geometry
    (torch.bfloat16, (4096, 2, 8, 2, 128, 512, 16)),
    (torch.float16, (1000, 4, 8, 2, 64, None, 3)),
    (torch.bfloat16, (777, 1, 4, 2, 256, 100, 2)),
    (torch.float16, (2048, 7, 4, 4, 128, None, 1)),
    (torch.float32, (1500, 2, 4, 1, 128, 64, 5)),
]


@gpu_only
@pytest.mark.parametrize(("dtype", "case"), _dtype_params(GPU_CASES))
def test_gpu_real_sizes(dtype, case):
    n, t, hq, hkv, d, w, nd = case
    check(n, t, hq, hkv, d, w, dtype, num_docs=nd, pad_tail=n // 50)


@gpu_only
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gpu_mla_kimi_size(dtype):
    """Kimi-K2.5's MLA draft: 64 heads, q/k 192 (nope 128 + rope 64), v 128, with
    a YaRN-scaled softmax scale."""
    check(1024, 3, 64, 64, 192, None, dtype, num_docs=4, pad_tail=20, dv=128,
          scale=0.1147)  # fmt: skip
