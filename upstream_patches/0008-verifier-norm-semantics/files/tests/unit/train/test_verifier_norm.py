"""The EAGLE-3 ``verifier_norm`` computes the verifier's own final norm."""

import importlib
import inspect
import re
from pathlib import Path

import pytest
import torch
import transformers

from speculators.models.utils import (
    GEMMA_STYLE_FINAL_NORM_MODEL_TYPES,
    LAYERNORM_1P_FINAL_NORM_MODEL_TYPES,
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
    return vc.build_zoo(tmp_path_factory.mktemp("zoo"))


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
        for name in ("llama", "gemma3", "falcon", "gpt_neox", "mpt", "nemotron")
    }
    assert kinds == {
        "llama": "rms",
        "gemma3": "gemma_rms",
        "falcon": "layernorm",
        "gpt_neox": "layernorm",
        "mpt": "layernorm",
        "nemotron": "layernorm_1p",
    }
    model = vc.eagle3_draft(zoo["gemma3"].path)
    assert type(model.verifier_norm) is resolve_verifier_norm_class(model.config)
    assert type(model.verifier_norm).__name__ == "Gemma3RMSNorm"


def test_layernorm_bias_loaded(zoo):
    cases = (("falcon", True), ("gpt_neox", True), ("mpt", False), ("nemotron", True))
    for name, bias in cases:
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


def test_norm_bias_without_a_place_is_refused(zoo):
    """A final norm with a bias loaded into an RMSNorm would lose the bias."""
    model = vc.eagle3_draft(zoo["llama"].path, hidden_act="silu")
    weight = torch.ones(verifiers.HIDDEN)
    with pytest.raises(ValueError, match="has a bias .* Qwen3RMSNorm"):
        model._load_verifier_norm(weight, torch.zeros(verifiers.HIDDEN))


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
    assert _adds_one(norm_class) == (model_type in GEMMA_STYLE_FINAL_NORM_MODEL_TYPES)


def _adds_one(norm_class: type) -> bool:
    """Whether ``norm_class`` computes ``x * (1 + w)``: with a zero weight,
    ``x * w`` is 0 and ``x * (1 + w)`` is the normalized ``x``."""
    norm = norm_class(verifiers.HIDDEN)
    with torch.no_grad():
        norm.weight.zero_()
        out = norm(torch.randn(3, verifiers.HIDDEN) + 1.0)
    return bool(out.abs().sum() > 0)


# Source text of an RMSNorm that adds one to its weight, and the final norm a
# decoder model's ``__init__`` builds next to its ``self.layers``.
_ONE_PLUS_WEIGHT = re.compile(r"1(?:\.0)?\s*\+\s*self\.weight|self\.weight\S*\s*\+\s*1")
_FINAL_NORM = re.compile(
    r"self\.(?:norm|norm_f|final_layernorm|final_norm)\s*=\s*"
    r"(\w+(?:RMSNorm|LayerNorm\w*))\("
)


def _installed_final_norms() -> dict[str, tuple[str, bool]]:
    """``model_type -> (final norm class, adds one)`` for every decoder model of
    the installed transformers whose modeling file has a norm adding one to its
    weight (only those files are imported)."""
    found: dict[str, tuple[str, bool]] = {}
    models_dir = Path(transformers.__file__).parent / "models"
    for path in sorted(models_dir.glob("*/modeling_*.py")):
        if not _ONE_PLUS_WEIGHT.search(path.read_text(encoding="utf-8")):
            continue
        module = importlib.import_module(
            f"transformers.models.{path.parent.name}.{path.stem}"
        )
        for name, cls in vars(module).items():
            if not (
                name.endswith("Model")
                and inspect.isclass(cls)
                and cls.__module__ == module.__name__
            ):
                continue
            init = inspect.getsource(cls.__init__)
            match = _FINAL_NORM.search(init)
            model_type = getattr(getattr(cls, "config_class", None), "model_type", "")
            if "self.layers" not in init or match is None or not model_type:
                continue
            norm_class = getattr(module, match.group(1))
            found[model_type] = (match.group(1), _adds_one(norm_class))
    return found


def test_gemma_style_list_covers_installed_transformers():
    """Every decoder model of the installed transformers whose final norm
    computes ``x * (1 + w)`` is listed (RMSNorm: Gemma-style; LayerNorm:
    Nemotron-style), so the lists cannot fall behind a new transformers release
    silently."""
    found = _installed_final_norms()
    assert found.get("gemma3_text") == ("Gemma3RMSNorm", True)
    assert found.get("nemotron") == ("NemotronLayerNorm1P", True)
    listed = {
        "RMSNorm": GEMMA_STYLE_FINAL_NORM_MODEL_TYPES,
        "LayerNorm": LAYERNORM_1P_FINAL_NORM_MODEL_TYPES,
    }
    kind = {
        model_type: "RMSNorm" if "RMSNorm" in norm else "LayerNorm"
        for model_type, (norm, _) in found.items()
    }
    missing = {
        model_type: norm
        for model_type, (norm, adds_one) in found.items()
        if adds_one and model_type not in listed[kind[model_type]]
    }
    wrongly_listed = {
        model_type: norm
        for model_type, (norm, adds_one) in found.items()
        if not adds_one and model_type in listed[kind[model_type]]
    }
    assert missing == {}
    assert wrongly_listed == {}
