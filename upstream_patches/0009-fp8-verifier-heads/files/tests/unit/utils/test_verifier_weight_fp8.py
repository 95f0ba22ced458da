"""FP8 output heads with 128x128 block scales are dequantized on load."""

from pathlib import Path

import pytest
import torch

from speculators.utils.verifier_weights import (
    VerifierWeightsError,
    load_verifier_tensors,
    resolve_verifier_weights,
)
from tests.unit.mock import verifier_checkpoints as vc
from tests.unit.mock import verifiers

VOCAB, HIDDEN = 300, 160


def _fp8_checkpoint(tmp_path: Path, scale: torch.Tensor | None):
    torch.manual_seed(0)
    reference = torch.randn(VOCAB, HIDDEN)
    blocks = torch.rand(3, 2) + 0.5
    expanded = blocks.repeat_interleave(128, 0)[:VOCAB].repeat_interleave(128, 1)
    fp8 = (reference / expanded[:, :HIDDEN]).to(torch.float8_e4m3fn)
    tensors = {
        "model.embed_tokens.weight": torch.randn(VOCAB, HIDDEN),
        "lm_head.weight": fp8,
        "model.norm.weight": torch.ones(HIDDEN),
    }
    if scale is not None:
        tensors["lm_head.weight_scale_inv"] = scale if scale.numel() else blocks
    tensors.update(
        {f"model.layers.{i}.x.weight": torch.ones(1) for i in range(verifiers.LAYERS)}
    )
    path = vc.llama_checkpoint(
        tmp_path / "ckpt", tensors, vocab_size=VOCAB, hidden_size=HIDDEN
    )
    return path, fp8.float() * expanded[:, :HIDDEN]


def test_fp8_block_scaled_head(tmp_path):
    path, expected = _fp8_checkpoint(tmp_path, torch.empty(0))
    spec = resolve_verifier_weights(path)
    assert spec.quantization is not None
    assert "F8_E4M3" in spec.quantization
    assert torch.equal(load_verifier_tensors(spec).head, expected)
    rows = torch.tensor([0, 129, 299, 7])
    assert torch.equal(load_verifier_tensors(spec, head_rows=rows).head, expected[rows])
    dest = torch.empty(len(rows), HIDDEN, dtype=torch.float64)
    loaded = load_verifier_tensors(spec, head_rows=rows, out={"head": dest})
    assert loaded.head is dest
    assert torch.equal(dest, expected[rows].double())


def test_fp8_head_without_scale_is_refused(tmp_path):
    path, _ = _fp8_checkpoint(tmp_path, None)
    with pytest.raises(VerifierWeightsError, match="FP8 without a block scale"):
        resolve_verifier_weights(path)


def test_fp8_scale_of_wrong_shape_is_refused(tmp_path):
    path, _ = _fp8_checkpoint(tmp_path, torch.ones(2, 2))
    with pytest.raises(VerifierWeightsError, match="does not match 128x128 blocks"):
        resolve_verifier_weights(path)
