"""The verifier's logits in ``evaluate`` are the ones it samples from.

Some ``ForCausalLM`` classes transform the head's logits: Cohere multiplies them
by ``logit_scale``, Granite divides them by ``logits_scaling``, Falcon-H1
multiplies them by ``lm_head_multiplier``, Gemma-2 caps them. On tiny random
checkpoints of those transformers classes, :class:`CausalVerifier`'s logits
(what greedy acceptance and rejection sampling compare the draft against) equal
the model's own ``ForCausalLM`` logits, and doctor says which transform it is.
The same holds for a head with a bias (Phi's), which doctor lists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from speculators_kimi.doctor import diagnose, render
from speculators_kimi.verifier.cache import verifier_cache
from speculators_kimi.verifier.causal import load_causal_verifier

PROMPT = [9, 40, 17, 33, 8, 99, 41, 7, 12, 60, 21]
_SIZES: dict[str, Any] = {
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "tie_word_embeddings": False,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
_MAMBA = {"mamba_d_head": 16, "mamba_n_heads": 8, "mamba_d_state": 16}
#: family -> (config class, ForCausalLM class, config values, doctor's words)
FAMILIES: dict[str, tuple[str, str, dict[str, Any], str]] = {
    "cohere": (
        "CohereConfig",
        "CohereForCausalLM",
        {"logit_scale": 0.125},
        "logits * 0.125 (logit_scale)",
    ),
    "granite": (
        "GraniteConfig",
        "GraniteForCausalLM",
        {"logits_scaling": 8.0},
        "logits / 8 (logits_scaling)",
    ),
    "granitemoehybrid": (
        "GraniteMoeHybridConfig",
        "GraniteMoeHybridForCausalLM",
        {
            "logits_scaling": 8.0,
            "layer_types": ["mamba", "attention"] * 2,
            "mamba_n_groups": 1,
            **_MAMBA,
        },
        "logits / 8 (logits_scaling)",
    ),
    "falcon_h1": (
        "FalconH1Config",
        "FalconH1ForCausalLM",
        {"lm_head_multiplier": 3.0, "mamba_d_ssm": 128, **_MAMBA},
        "logits * 3 (lm_head_multiplier)",
    ),
    "gemma2": (
        "Gemma2Config",
        "Gemma2ForCausalLM",
        {"final_logit_softcapping": 0.5, "head_dim": 16},
        "0.5 * tanh(logits / 0.5) (final_logit_softcapping)",
    ),
}


def _build(path: Path, family: str) -> Any:
    """The family's tiny ForCausalLM, saved at ``path``; its head scaled up so
    that a missing cap or scale changes the logits well beyond rounding."""
    config_class, model_class, values, _ = FAMILIES[family]
    config = getattr(transformers, config_class)(**_SIZES, **values)
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(config).eval()
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, 2.0)
    model.save_pretrained(path)
    return model


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, tuple[Path, Any]]:
    root = tmp_path_factory.mktemp("logit_transform")
    return {name: (root / name, _build(root / name, name)) for name in FAMILIES}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_causal_verifier_logits_are_the_models(built, family):
    path, model = built[family]
    verifier = load_causal_verifier(path, [1, 2, 3], dtype=torch.float32)
    logits, _ = verifier.forward(PROMPT, verifier_cache(verifier.decoder))
    with torch.no_grad():
        want = model(torch.tensor([PROMPT])).logits[0]
    torch.testing.assert_close(logits, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_doctor_names_the_transform(built, family):
    path, _ = built[family]
    report = diagnose(str(path))
    assert report.text_config is not None
    assert report.text_config["logit_transform"] == FAMILIES[family][3]
    assert f"  logits after the head: {FAMILIES[family][3]}; " in render(report)


def test_doctor_says_nothing_for_a_plain_verifier(tmp_path):
    config = transformers.LlamaConfig(**_SIZES)
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path)
    report = diagnose(str(tmp_path))
    assert report.text_config is not None
    assert report.text_config["logit_transform"] is None
    assert "logits after the head" not in render(report)


def test_causal_verifier_logits_include_the_head_bias(tmp_path):
    """Phi's head has a bias: the logits it samples from include it."""
    config = transformers.PhiConfig(**_SIZES)
    torch.manual_seed(0)
    model = transformers.PhiForCausalLM(config).eval()
    with torch.no_grad():  # far from 0, so that leaving it out moves the argmax
        model.lm_head.bias.normal_(0.0, 4.0)
    model.save_pretrained(tmp_path)
    verifier = load_causal_verifier(tmp_path, [1, 2, 3], dtype=torch.float32)
    logits, _ = verifier.forward(PROMPT, verifier_cache(verifier.decoder))
    with torch.no_grad():
        want = model(torch.tensor([PROMPT])).logits[0]
    torch.testing.assert_close(logits, want, rtol=1e-4, atol=1e-4)
    assert not torch.equal(logits.argmax(-1), (want - model.lm_head.bias).argmax(-1))
    text = render(diagnose(str(tmp_path)))
    assert "  head bias:  lm_head.bias  [256] F32  [model.safetensors]" in text
