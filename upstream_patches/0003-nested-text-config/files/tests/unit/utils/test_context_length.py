import pytest
from transformers import GPT2Config, LlamaConfig, MptConfig, PretrainedConfig

from speculators.train.cli import create_transformer_layer_config
from speculators.utils.text_config import resolve_max_position_embeddings


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (LlamaConfig(max_position_embeddings=4096), 4096),
        (MptConfig(max_seq_len=3072), 3072),
        (GPT2Config(n_positions=1536), 1536),
        (PretrainedConfig.from_dict({"seq_length": 8192}), 8192),
        (PretrainedConfig.from_dict({"max_sequence_length": 2560}), 2560),
    ],
    ids=["llama", "mpt", "gpt2", "seq-length", "max-sequence-length"],
)
def test_context_length_under_any_name(config, expected):
    assert resolve_max_position_embeddings(config) == expected


def test_missing_context_length_names_the_fix():
    with pytest.raises(ValueError, match="--draft-config"):
        resolve_max_position_embeddings(PretrainedConfig())


def test_draft_config_from_an_mpt_verifier(tmp_path):
    # MPT names its context length max_seq_len (and no hidden_act: given here).
    MptConfig(
        vocab_size=128, d_model=64, n_layers=4, n_heads=4, max_seq_len=3072
    ).save_pretrained(tmp_path)
    config = create_transformer_layer_config(
        str(tmp_path), 1, "llama", "silu", 2048, []
    )
    assert config.max_position_embeddings == 3072
    assert config.hidden_size == 64
    assert config.num_attention_heads == 4
