"""Resolution of a verifier's text config across nested / remote-code layouts."""

import json
from pathlib import Path

import pytest
from transformers import PretrainedConfig

from speculators.models.utils import get_verifier_config, resolve_target_layer_ids
from speculators.train.vocab_mapping import get_target_vocab_size
from speculators.utils.text_config import (
    AmbiguousTextConfigError,
    get_text_config,
    load_config_dict,
    load_text_config,
    resolve_attention_head_dim,
    resolve_norm_eps,
    text_config_dict,
    ties_word_embeddings,
)
from tests.unit.mock import verifiers

GEOMETRY = (
    "hidden_size",
    "vocab_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
    "max_position_embeddings",
    "tie_word_embeddings",
)


def _geometry(config: PretrainedConfig) -> dict:
    return {key: getattr(config, key, None) for key in GEOMETRY}


def test_kimi_k25_native_and_hub_resolve_to_same_text_config(tmp_path: Path):
    native = load_text_config(verifiers.kimi_k25_native(tmp_path / "native"))
    hub_dir, marker = verifiers.kimi_k25_hub(tmp_path / "hub")

    from_data = load_text_config(hub_dir)
    assert not marker.exists(), "trust_remote_code=False imported checkpoint code"

    from_remote = load_text_config(hub_dir, trust_remote_code=True)
    assert marker.exists(), "trust_remote_code=True did not use the remote code"

    assert type(native) is type(from_data) is type(from_remote)
    assert type(native).__name__ == "DeepseekV3Config"
    assert _geometry(native) == _geometry(from_data) == _geometry(from_remote)
    assert native.hidden_size == verifiers.HIDDEN
    assert native.num_hidden_layers == verifiers.LAYERS
    assert resolve_attention_head_dim(native) == verifiers.MLA.head_dim
    # The quantization config nested in the hub text config is kept as data.
    assert from_data.quantization_config["quant_method"] == "compressed-tensors"


def test_kimi_k25_tie_flag_comes_from_text_config(tmp_path: Path):
    path = verifiers.kimi_k25_native(tmp_path / "kimi")
    wrapper = json.loads((path / "config.json").read_text())
    assert wrapper.get("tie_word_embeddings", True) is True  # the wrapper default
    assert ties_word_embeddings(wrapper) is False
    assert load_text_config(path).tie_word_embeddings is False


def test_gemma3_tied(tmp_path: Path):
    path = verifiers.gemma3(tmp_path / "gemma3")
    assert ties_word_embeddings(load_config_dict(path)) is True
    assert ties_word_embeddings(load_text_config(path)) is True


@pytest.mark.parametrize(
    ("sub_name", "model_type"),
    [
        ("text_config", "acme_vlm"),
        ("llm_config", "internvl_chat"),
        ("language_config", "deepseek_vl_v2"),
    ],
)
def test_remote_code_wrapper_read_as_data(
    tmp_path: Path, sub_name: str, model_type: str
):
    vision = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}
    path, marker = verifiers.remote_wrapper(
        tmp_path / model_type, model_type, sub_name, vision_config=vision
    )
    text = load_text_config(path)
    assert not marker.exists()
    assert type(text).__name__ == "LlamaConfig"
    assert text.hidden_size == verifiers.HIDDEN
    assert text.vocab_size == verifiers.VOCAB
    assert text.num_key_value_heads == verifiers.KV_HEADS

    remote = load_text_config(path, trust_remote_code=True)
    assert marker.exists()
    assert remote.hidden_size == text.hidden_size
    assert remote.num_hidden_layers == text.num_hidden_layers

    # Every verifier-config reader goes through the same resolution.
    assert get_verifier_config(str(path)).hidden_size == verifiers.HIDDEN
    assert get_target_vocab_size(None, str(path)) == verifiers.VOCAB
    with pytest.warns(UserWarning, match="target-layer-ids"):
        assert resolve_target_layer_ids(None, str(path)) == [2, 4, 5]


def test_unknown_text_model_type_keeps_values(tmp_path: Path):
    path, marker = verifiers.remote_wrapper(
        tmp_path / "internlm", "internvl_chat", "llm_config", "internlm2"
    )
    text = load_text_config(path)
    assert not marker.exists()
    assert text.hidden_size == verifiers.HIDDEN
    assert text.num_attention_heads == verifiers.HEADS


def test_omni_thinker_text_config(tmp_path: Path):
    path = verifiers.qwen2_5_omni(tmp_path / "omni")
    text = load_text_config(path)
    assert type(text).__name__ == "Qwen2_5OmniTextConfig"
    assert text.hidden_size == verifiers.HIDDEN
    assert text.vocab_size == verifiers.VOCAB
    # The raw dict (converters) resolves thinker_config.text_config as well;
    # the talker sub-config also has sizes and must not win.
    raw = load_config_dict(path)
    assert text_config_dict(raw)["hidden_size"] == verifiers.HIDDEN
    assert raw["talker_config"]["hidden_size"] != verifiers.HIDDEN


def test_omni_as_plain_dict_wrapper(tmp_path: Path):
    thinker = {"text_config": {"model_type": "qwen2", **verifiers.dense_text()}}
    text = get_text_config({"model_type": "acme_omni", "thinker_config": thinker})
    assert text.hidden_size == verifiers.HIDDEN


@pytest.mark.parametrize(
    "builder",
    [
        verifiers.qwen2_5_vl,
        verifiers.gemma3,
        verifiers.llama4,
        verifiers.llama,
        verifiers.deepseek_v3,
    ],
)
def test_known_layouts(tmp_path: Path, builder):
    path = builder(tmp_path / builder.__name__)
    text = load_text_config(path)
    assert text.hidden_size == verifiers.HIDDEN
    assert text.vocab_size == verifiers.VOCAB
    assert text.num_hidden_layers == verifiers.LAYERS
    assert text_config_dict(load_config_dict(path))["hidden_size"] == (verifiers.HIDDEN)


def test_structural_search_finds_single_candidate():
    config = {
        "model_type": "acme_vlm",
        "vision_tower": {"hidden_size": 32, "num_hidden_layers": 2},
        "backbone": {"model_type": "llama", **verifiers.dense_text()},
    }
    assert get_text_config(config).hidden_size == verifiers.HIDDEN


def test_ambiguous_wrapper_lists_candidates(tmp_path: Path):
    lm_b = verifiers.dense_text(model_type="llama", vocab_size=99)
    path, marker = verifiers.remote_wrapper(
        tmp_path / "ambiguous", "acme_dual", "lm_a", lm_b=lm_b
    )
    with pytest.raises(AmbiguousTextConfigError) as info:
        load_text_config(path)
    message = str(info.value)
    assert "'lm_a' (hidden_size=64, vocab_size=256, num_hidden_layers=8)" in message
    assert "'lm_b' (hidden_size=64, vocab_size=99, num_hidden_layers=8)" in message
    assert "text_config_path=" in message
    assert not marker.exists()

    chosen = load_text_config(path, text_config_path="lm_b")
    assert chosen.vocab_size == 99


def test_mla_head_dim():
    text = get_text_config({"model_type": "deepseek_v3", **verifiers.mla_text()})
    assert text.head_dim == 8  # transformers: the rotary part
    assert resolve_attention_head_dim(text) == 32
    dense = get_text_config({"model_type": "llama", **verifiers.dense_text()})
    assert resolve_attention_head_dim(dense) == verifiers.HIDDEN // verifiers.HEADS


def test_converter_vocab_lookup_prefers_text_config(tmp_path: Path):
    path = verifiers.qwen2_5_omni(tmp_path / "omni")
    raw = load_config_dict(path)
    # The talker sub-config (vocab 8448) also has a vocab_size; the thinker's
    # text config is the verifier's.
    assert text_config_dict(raw)["vocab_size"] == verifiers.VOCAB
    assert raw["talker_config"]["vocab_size"] != verifiers.VOCAB


def test_non_finite_floats_are_decoded(tmp_path: Path):
    # JSON has no Infinity: transformers writes Nemotron-H's time_step_limit
    # (0.0, inf) as [0.0, {"__float__": "Infinity"}] and decodes it on reading.
    nemotron_h = verifiers.transformers_class("NemotronHConfig")
    nemotron_h(vocab_size=verifiers.VOCAB).save_pretrained(tmp_path)
    assert '"__float__": "Infinity"' in (tmp_path / "config.json").read_text()
    assert load_config_dict(tmp_path)["time_step_limit"][1] == float("inf")
    text = load_text_config(tmp_path)
    assert text.model_type == "nemotron_h"
    assert text.time_step_limit[1] == float("inf")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("rms_norm_eps", 1e-5),
        ("layer_norm_epsilon", 1e-4),
        ("norm_epsilon", 1e-3),
        ("norm_eps", 2e-5),
    ],
)
def test_norm_eps_under_each_name(name: str, value: float):
    assert resolve_norm_eps(PretrainedConfig(**{name: value})) == value
    assert resolve_norm_eps(PretrainedConfig()) == 1e-6
