"""The EAGLE-3 ``verifier_norm`` computes the verifier's own final norm."""

import pytest
import torch

from speculators.models.utils import (
    GEMMA_STYLE_FINAL_NORM_MODEL_TYPES,
    resolve_verifier_norm_class,
)
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


# The final-norm class each listed family's transformers model applies, probed:
# with a zero weight, x * w is 0 and x * (1 + w) is the normalized x.
FINAL_NORM_CLASSES = {
    "gemma": ("gemma", "GemmaRMSNorm"),
    "gemma2": ("gemma2", "Gemma2RMSNorm"),
    "gemma3_text": ("gemma3", "Gemma3RMSNorm"),
    "qwen3_5_text": ("qwen3_5", "Qwen3_5RMSNorm"),
    "qwen3_5_moe_text": ("qwen3_5_moe", "Qwen3_5MoeRMSNorm"),
    "qwen3_next": ("qwen3_next", "Qwen3NextRMSNorm"),
    "recurrent_gemma": ("recurrent_gemma", "RecurrentGemmaRMSNorm"),
    "vaultgemma": ("vaultgemma", "VaultGemmaRMSNorm"),
    "minimax_m3_vl_text": ("minimax_m3_vl", "MiniMaxM3VLRMSNorm"),
    "step3p5": ("step3p7", "Step3p7RMSNorm"),
    "llama": ("llama", "LlamaRMSNorm"),
    "qwen3": ("qwen3", "Qwen3RMSNorm"),
    "deepseek_v3": ("deepseek_v3", "DeepseekV3RMSNorm"),
    "nemotron_h": ("nemotron_h", "NemotronHRMSNorm"),
    "kimi_linear": ("kimi_linear", "KimiLinearRMSNorm"),
}


@pytest.mark.parametrize("model_type", list(FINAL_NORM_CLASSES))
def test_gemma_style_list_matches_transformers_norms(model_type):
    module, name = FINAL_NORM_CLASSES[model_type]
    norm_class = getattr(
        pytest.importorskip(f"transformers.models.{module}.modeling_{module}"),
        name,
        None,
    )
    if norm_class is None:
        pytest.skip(f"this transformers has no {name}")
    norm = norm_class(verifiers.HIDDEN)
    with torch.no_grad():
        norm.weight.zero_()
        out = norm(torch.randn(3, verifiers.HIDDEN) + 1.0)
    adds_one = bool(out.abs().sum() > 0)
    assert adds_one == (model_type in GEMMA_STYLE_FINAL_NORM_MODEL_TYPES)
