"""Verifier tensors are read block by block: selected rows, into destinations,
checked for NaN/inf."""

import pytest
import torch

from speculators.utils.verifier_weights import (
    VerifierWeightsError,
    finite,
    has_nan,
    load_verifier_tensors,
    loader,
    resolve_verifier_weights,
)
from tests.unit.mock import verifier_checkpoints as vc
from tests.unit.mock import verifiers


@pytest.fixture(scope="module")
def kimi(tmp_path_factory) -> vc.Zoo:
    return vc.ZOO["kimi_k25_sharded"](tmp_path_factory.mktemp("zoo"))


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of a few rows, so every test tensor spans several blocks."""
    monkeypatch.setattr(loader, "_BLOCK_BYTES", 3 * verifiers.HIDDEN * 4)


@pytest.mark.usefixtures("small_blocks")
def test_draft_vocab_reads_selected_rows_only(kimi):
    spec = resolve_verifier_weights(kimi.path)
    assert spec.embed.shard != spec.head.shard
    mask = torch.zeros(verifiers.VOCAB, dtype=torch.bool)
    mask[
        torch.randperm(verifiers.VOCAB, generator=torch.Generator().manual_seed(0))[:40]
    ] = True
    tensors = load_verifier_tensors(spec, head_rows=mask)
    assert torch.equal(tensors.head, kimi.head[mask])
    assert tensors.embed is not None
    assert torch.equal(tensors.embed, kimi.embed)
    ids = torch.tensor([5, 200, 3, 4095 % verifiers.VOCAB])
    tensors = load_verifier_tensors(spec, head_rows=ids, load_norm=False)
    assert torch.equal(tensors.head, kimi.head[ids])
    assert tensors.norm_weight is None


@pytest.mark.usefixtures("small_blocks")
def test_bf16_rows_any_order_and_repeats(tmp_path):
    tensors = vc.minimal_llama_tensors()
    tensors["lm_head.weight"] = torch.randn(verifiers.VOCAB, verifiers.HIDDEN).to(
        torch.bfloat16
    )
    spec = resolve_verifier_weights(vc.llama_checkpoint(tmp_path / "ckpt", tensors))
    rows = torch.tensor([9, 3, 4, 5, 9, 255, 0])
    head = load_verifier_tensors(spec, head_rows=rows).head
    assert head.dtype == torch.bfloat16
    assert torch.equal(head, tensors["lm_head.weight"][rows])
    with pytest.raises(VerifierWeightsError, match="out of range"):
        load_verifier_tensors(spec, head_rows=torch.tensor([verifiers.VOCAB]))


@pytest.mark.usefixtures("small_blocks")
def test_load_into_destinations_single_copy(kimi):
    """out= fills the given tensors in place (any dtype) and returns them."""
    spec = resolve_verifier_weights(kimi.path)
    mask = torch.zeros(verifiers.VOCAB, dtype=torch.bool)
    mask[::3] = True
    embed = torch.full_like(kimi.embed, float("nan"))
    head = torch.full((int(mask.sum()), verifiers.HIDDEN), float("nan"))
    head = head.to(torch.float64)  # a different dtype: converted block by block
    tensors = load_verifier_tensors(
        spec, head_rows=mask, out={"embed": embed, "head": head}
    )
    assert tensors.embed is embed
    assert tensors.head is head
    assert torch.equal(embed, kimi.embed)
    assert torch.equal(head, kimi.head[mask].to(torch.float64))
    skipped = load_verifier_tensors(spec, head_rows=mask, load_embed=False)
    assert skipped.embed is None
    assert torch.equal(skipped.head, kimi.head[mask])
    with pytest.raises(VerifierWeightsError, match="Destination.*shape"):
        load_verifier_tensors(spec, out={"embed": torch.empty(3, 3)})


@pytest.mark.usefixtures("small_blocks")
@pytest.mark.parametrize(
    "dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64]
)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_error_nonfinite_embed_names_key(tmp_path, dtype, bad):
    tensors = vc.minimal_llama_tensors()
    embed = torch.randn(verifiers.VOCAB, verifiers.HIDDEN).to(dtype)
    embed[verifiers.VOCAB - 1, 2] = bad
    tensors["model.embed_tokens.weight"] = embed
    spec = resolve_verifier_weights(vc.llama_checkpoint(tmp_path / "ckpt", tensors))
    with pytest.raises(VerifierWeightsError, match="'model.embed_tokens.weight'.*NaN"):
        load_verifier_tensors(spec)
    with pytest.raises(VerifierWeightsError, match="'model.embed_tokens.weight'.*NaN"):
        load_verifier_tensors(spec, out={"embed": torch.empty_like(embed).float()})


def test_error_nan_in_norm(tmp_path):
    tensors = vc.minimal_llama_tensors()
    tensors["model.norm.weight"][3] = float("nan")
    spec = resolve_verifier_weights(vc.llama_checkpoint(tmp_path / "ckpt", tensors))
    with pytest.raises(VerifierWeightsError, match="'model.norm.weight'.*NaN"):
        load_verifier_tensors(spec)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_has_nan_matches_isnan_any_in_every_piece(monkeypatch, dtype):
    # Small pieces so a 1000-element tensor spans the probe and several pieces.
    monkeypatch.setattr(finite, "_NAN_PROBE_ELEMENTS", 16)
    monkeypatch.setattr(finite, "_NAN_PIECE_ELEMENTS", 100)
    base = torch.randn(10, 100).to(dtype)
    assert not has_nan(base)
    for flat_index in (0, 15, 16, 115, 116, 999):
        tensor = base.clone()
        tensor.view(-1)[flat_index] = float("nan")
        assert has_nan(tensor), flat_index
        assert has_nan(tensor.t()), flat_index  # non-contiguous
    assert not has_nan(base.masked_fill(base > 0, float("inf")))
    assert has_nan(torch.full((3, 3), float("nan"), dtype=dtype))
    assert not has_nan(torch.empty(0, dtype=dtype))
    assert not has_nan(torch.arange(10))


def test_bit_level_finite_check_is_exact():
    """Every bf16/f16 and fp8 bit pattern: finite exactly where torch says so."""
    for dtype in (torch.bfloat16, torch.float16):
        values = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
        values = values.view(dtype)
        got = [finite._is_finite(values[i : i + 1]) for i in range(65536)]
        assert got == torch.isfinite(values.float()).tolist()
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        values = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype)
        got = [finite._is_finite(values[i : i + 1]) for i in range(256)]
        assert got == torch.isfinite(values.float()).tolist()
    for dtype in (torch.float32, torch.float64):
        specials = torch.tensor([0.0, -0.0, 1e30, -1e30, float("inf"), float("-inf")])
        specials = torch.cat([specials, torch.tensor([float("nan")])]).to(dtype)
        got = [finite._is_finite(specials[i : i + 1]) for i in range(len(specials))]
        assert got == torch.isfinite(specials).tolist()
