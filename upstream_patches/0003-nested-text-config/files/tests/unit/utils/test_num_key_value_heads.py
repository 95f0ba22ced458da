import pytest
from transformers import FalconConfig, GPTNeoXConfig, LlamaConfig

from speculators.train.cli import create_transformer_layer_config
from speculators.utils.text_config import resolve_num_key_value_heads


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (LlamaConfig(num_attention_heads=4, num_key_value_heads=2), 2),
        (GPTNeoXConfig(num_attention_heads=4, hidden_size=64), 4),
        (
            FalconConfig(
                num_attention_heads=4,
                hidden_size=64,
                num_kv_heads=2,
                new_decoder_architecture=True,
            ),
            2,
        ),
        (
            FalconConfig(
                num_attention_heads=4,
                hidden_size=64,
                multi_query=True,
                new_decoder_architecture=False,
            ),
            1,
        ),
    ],
    ids=["llama", "gpt-neox", "falcon-gqa", "falcon-mqa"],
)
def test_key_value_heads(config, expected):
    assert resolve_num_key_value_heads(config) == expected


def test_draft_config_from_a_gpt_neox_verifier(tmp_path):
    # GPT-NeoX configs have no num_key_value_heads: multi-head attention.
    GPTNeoXConfig(
        vocab_size=128,
        hidden_size=64,
        num_hidden_layers=8,
        num_attention_heads=4,
        intermediate_size=128,
    ).save_pretrained(tmp_path)
    config = create_transformer_layer_config(str(tmp_path), 1, "llama", None, 2048, [])
    assert config.num_attention_heads == 4
    assert config.num_key_value_heads == 4
    assert config.hidden_size == 64
    assert config.head_dim == 16
