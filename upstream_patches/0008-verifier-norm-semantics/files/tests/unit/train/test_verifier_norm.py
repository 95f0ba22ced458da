"""The EAGLE-3 ``verifier_norm`` computes the verifier's own final norm."""

import pytest
import torch

from speculators.models.utils import resolve_verifier_norm_class
from speculators.utils.verifier_weights import (
    load_verifier_tensors,
    resolve_verifier_weights,
)
from tests.unit.mock import verifier_checkpoints as vc
from tests.unit.mock import verifiers


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> dict[str, vc.Zoo]:
    tmp = tmp_path_factory.mktemp("zoo")
    return {name: build(tmp) for name, build in vc.ZOO.items()}


@pytest.mark.parametrize("name", list(vc.ZOO))
def test_verifier_norm_reproduces_final_norm(zoo, name):
    """verifier_norm(h) == the verifier's final norm(h): plain, Gemma, LayerNorm."""
    entry = zoo[name]
    model = vc.eagle3_draft(entry.path, hidden_act="silu", target_layer_ids=[0, 1])
    torch.manual_seed(3)
    hidden = torch.randn(2, 5, verifiers.HIDDEN)
    with torch.no_grad():
        torch.testing.assert_close(
            model.verifier_norm(hidden), entry.final_norm(hidden), rtol=0, atol=0
        )
    assert not any(p.requires_grad for p in model.verifier_norm.parameters())


def test_norm_kinds_follow_upstream_families(zoo):
    kinds = {
        name: resolve_verifier_weights(zoo[name].path).norm_kind
        for name in ("llama", "gemma3", "falcon", "gpt_neox", "mpt")
    }
    assert kinds == {
        "llama": "rms",
        "gemma3": "gemma_rms",
        "falcon": "layernorm",
        "gpt_neox": "layernorm",
        "mpt": "layernorm",
    }
    model = vc.eagle3_draft(zoo["gemma3"].path)
    assert type(model.verifier_norm) is resolve_verifier_norm_class(model.config)
    assert type(model.verifier_norm).__name__ == "Gemma3RMSNorm"


def test_layernorm_bias_loaded(zoo):
    for name, bias in (("falcon", True), ("gpt_neox", True), ("mpt", False)):
        spec = resolve_verifier_weights(zoo[name].path)
        assert (spec.norm_bias is not None) is bias
        tensors = load_verifier_tensors(spec)
        if bias:
            assert tensors.norm_bias is not None
            assert torch.equal(tensors.norm_bias, zoo[name].final_norm.bias)


def test_norm_bias_not_saved_and_reloaded_from_verifier(zoo, tmp_path):
    entry = zoo["falcon"]
    model = vc.eagle3_draft(entry.path, hidden_act="silu", target_layer_ids=[0, 1])
    model.save_pretrained(tmp_path / "ckpt")
    reloaded = type(model).from_pretrained(tmp_path / "ckpt")
    assert torch.equal(reloaded.verifier_norm.bias, entry.final_norm.bias)
