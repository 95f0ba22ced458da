"""Which decoders the aux-state hooks can read (``verifier/capture.py``)."""

from __future__ import annotations

import pytest
from transformers import Lfm2Config, Lfm2ForCausalLM

from speculators_kimi.verifier.capture import UnsupportedDecoderError, decoder_parts


def test_a_decoder_without_a_final_norm_it_knows_is_one_line_naming_its_modules():
    """LFM2's final norm is ``embedding_norm`` (NeoMME's is its input norm): not
    guessed, refused as a command error (one line) that lists what the model has."""
    config = Lfm2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        layer_types=["conv", "full_attention"],
    )
    with pytest.raises(UnsupportedDecoderError) as err:
        decoder_parts(Lfm2ForCausalLM(config))
    message = str(err.value)
    assert message.startswith("Lfm2ForCausalLM: the aux states are read as")
    assert "Lfm2Model has 1 such list(s) and 0 such norm(s)" in message
    assert "embedding_norm" in message
    assert "\n" not in message
