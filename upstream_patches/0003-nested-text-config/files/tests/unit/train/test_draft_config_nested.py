"""The eagle3 draft config training derives from nested / remote-code verifiers."""

import json
import warnings
from pathlib import Path

import pytest

from speculators.models.utils import resolve_target_layer_ids
from speculators.train.cli import (
    create_transformer_layer_config,
    load_draft_transformer_layer_config,
)
from tests.unit.mock import verifiers


def _kimi_hub(path: Path) -> Path:
    checkpoint, marker = verifiers.kimi_k25_hub(path)
    return checkpoint


def _remote_text_config(path: Path) -> Path:
    return verifiers.remote_wrapper(path, "acme_vlm", "text_config")[0]


def _remote_llm_config(path: Path) -> Path:
    vision = {"hidden_size": 32, "num_hidden_layers": 2}
    return verifiers.remote_wrapper(
        path, "internvl_chat", "llm_config", "qwen2", vision_config=vision
    )[0]


CASES = [
    (verifiers.kimi_k25_native, verifiers.MLA),
    (_kimi_hub, verifiers.MLA),
    (_remote_text_config, verifiers.DENSE),
    (_remote_llm_config, verifiers.DENSE),
    (verifiers.qwen2_5_vl, verifiers.DENSE),
    (verifiers.gemma3, verifiers.DENSE),
    (verifiers.llama4, verifiers.DENSE),
    (verifiers.qwen2_5_omni, verifiers.DENSE),
    (verifiers.llama, verifiers.DENSE),
    (verifiers.deepseek_v3, verifiers.MLA),
]


def _build(path: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return create_transformer_layer_config(
            verifier_name_or_path=str(path),
            num_layers=1,
            draft_arch="llama",
            hidden_act=None,
            sliding_window=32,
            full_attention_indices=[0],
        )


@pytest.mark.parametrize(
    ("builder", "expected"), CASES, ids=[case[0].__name__ for case in CASES]
)
def test_draft_config_matches_text_config(tmp_path: Path, builder, expected):
    path = builder(tmp_path / builder.__name__)
    draft = _build(path)
    assert draft.hidden_size == expected.hidden_size
    assert draft.vocab_size == expected.vocab_size
    assert draft.num_attention_heads == expected.num_attention_heads
    assert draft.head_dim == expected.head_dim
    assert draft.num_key_value_heads == expected.num_key_value_heads
    assert draft.num_hidden_layers == 1
    assert draft.tie_word_embeddings is False

    layers = expected.num_hidden_layers
    with pytest.warns(UserWarning, match="target-layer-ids"):
        target_layer_ids = resolve_target_layer_ids(None, str(path))
    assert target_layer_ids == [2, layers // 2, layers - 3]


def test_kimi_hub_draft_config_runs_no_remote_code(tmp_path: Path):
    path, marker = verifiers.kimi_k25_hub(tmp_path / "kimi")
    draft = _build(path)
    assert not marker.exists()
    # Kimi-K2.5 geometry scaled down: heads x v_head_dim, not the rope head_dim.
    assert (draft.num_attention_heads, draft.head_dim) == (verifiers.HEADS, 32)


def test_explicit_draft_config_wins_for_mla(tmp_path: Path):
    verifier = verifiers.kimi_k25_native(tmp_path / "kimi")
    draft_file = tmp_path / "draft.json"
    draft_file.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": verifiers.HIDDEN,
                "vocab_size": verifiers.VOCAB,
                "num_hidden_layers": 1,
                "num_attention_heads": 8,
                "num_key_value_heads": 8,
                "head_dim": 8,
            }
        )
    )
    draft = load_draft_transformer_layer_config(str(draft_file), str(verifier))
    assert (draft.num_attention_heads, draft.head_dim) == (8, 8)


def test_ambiguous_verifier_fails_with_candidates(tmp_path: Path):
    lm_b = verifiers.dense_text(model_type="llama")
    path, _ = verifiers.remote_wrapper(
        tmp_path / "ambiguous", "acme_dual", "lm_a", lm_b=lm_b
    )
    with pytest.raises(ValueError, match="'lm_a'.*'lm_b'"):
        _build(path)


def test_nemotron_h_activation_and_saved_config(tmp_path: Path):
    # Nemotron-H names its activation mlp_hidden_act, and its saved config holds
    # an encoded Infinity (time_step_limit) that must be read back as a float.
    verifiers.transformers_class("NemotronHConfig")(
        **verifiers.dense_text(intermediate_size=96), mlp_hidden_act="relu2"
    ).save_pretrained(tmp_path)
    draft = _build(tmp_path)
    assert draft.hidden_act == "relu2"
    assert draft.hidden_size == verifiers.HIDDEN
