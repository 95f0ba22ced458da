"""Which decoders the aux-state hooks can read (``verifier/capture.py``), and that
they read the layers and the final norm training resolved (``--verifier-norm-key``
included), wherever the decoder holds them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import rows_dataset
from safetensors.torch import load_file
from transformers import (
    AutoModelForCausalLM,
    Lfm2Config,
    Lfm2ForCausalLM,
    OPTConfig,
    OPTForCausalLM,
    XGLMConfig,
    XGLMForCausalLM,
)

from speculators_kimi import cli
from speculators_kimi.datagen import generate_hidden_states
from speculators_kimi.verifier import load_causal_verifier
from speculators_kimi.verifier.capture import UnsupportedDecoderError, decoder_parts

#: LFM2's final norm, as its checkpoint names it (found by its model type: unit 0046).
LFM2_NORM = "model.embedding_norm.weight"
IDS = [1, 5, 9, 3, 7, 2]


def _lfm2(**sizes: int) -> Lfm2ForCausalLM:
    config = Lfm2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=sizes.get("layers", 2),
        num_attention_heads=2,
        num_key_value_heads=1,
        layer_types=["conv", "full_attention"] * (sizes.get("layers", 2) // 2),
    )
    return Lfm2ForCausalLM(config)


@pytest.fixture(scope="module")
def lfm2(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("lfm2") / "verifier"
    torch.manual_seed(0)
    _lfm2(layers=8).save_pretrained(path)
    return path


def _expected(verifier: Path, ids: list[int], layer_ids: list[int]) -> torch.Tensor:
    """The verifier's own states: the input of each aux layer (transformers'
    ``hidden_states[i]``), then the final norm's input, which the final norm
    maps onto the model's last hidden state (checked here)."""
    model = AutoModelForCausalLM.from_pretrained(verifier, dtype=torch.float32)
    out = model(torch.tensor([ids]), output_hidden_states=True)
    states = [out.hidden_states[i][0] for i in layer_ids]
    return torch.stack(states, dim=1)


def test_a_decoder_without_a_final_norm_it_knows_is_one_line_naming_its_modules():
    """XGLM's final norm is ``layer_norm``, a name no family has (the BART-style
    decoders give it to theirs too): not guessed, refused as a command error (one
    line) that lists what the model has."""
    config = XGLMConfig(
        vocab_size=64, d_model=32, ffn_dim=64, num_layers=2, attention_heads=2
    )
    with pytest.raises(UnsupportedDecoderError) as err:
        decoder_parts(XGLMForCausalLM(config))
    message = str(err.value)
    assert message.startswith("XGLMForCausalLM: the aux states are read as")
    assert "XGLMModel has 1 such list(s) and 0 such norm(s)" in message
    assert "layer_norm" in message
    assert "\n" not in message
    # A norm inside the layers is not a final norm, named or not.
    with pytest.raises(UnsupportedDecoderError, match="is a module of its decoder"):
        decoder_parts(_lfm2(), "layers.0.operator_norm")


def test_lfm2s_final_norm_is_found_by_its_model_type():
    """LFM2 names its final norm ``embedding_norm`` (NeoMME gives that name to its
    input norm): the weight resolver's name for LFM2 finds it, and only it."""
    model = _lfm2()
    layers, norm = decoder_parts(model)
    assert layers is model.model.layers
    assert norm is model.model.embedding_norm


def test_opt_keeps_its_decoder_under_decoder_and_is_read_there(tmp_path):
    """OPT's base model holds embedding, layers and final norm under ``decoder``
    (checkpoint ``model.decoder.``): loaded whole (it failed with "36 text-model
    weight(s) not loaded") and its states are the model's own."""
    verifier = tmp_path / "opt"
    torch.manual_seed(0)
    config = OPTConfig(
        vocab_size=64,
        hidden_size=32,
        ffn_dim=64,
        num_hidden_layers=4,
        num_attention_heads=2,
        word_embed_proj_dim=32,
        max_position_embeddings=64,
    )
    OPTForCausalLM(config).save_pretrained(verifier)
    data = rows_dataset(tmp_path / "data", [IDS])
    generate_hidden_states(
        verifier,
        data,
        dtype="float32",
        device="cpu",
        target_layer_ids=[1, 3],
        progress=False,
    )
    got = load_file(data / "hidden_states" / "hs_0.safetensors")["hidden_states"]
    torch.testing.assert_close(got[:, :2], _expected(verifier, IDS, [1, 3]))
    model = OPTForCausalLM.from_pretrained(verifier, dtype=torch.float32)
    last = model.model(torch.tensor([IDS])).last_hidden_state[0]
    torch.testing.assert_close(model.model.decoder.final_layer_norm(got[:, 2]), last)


@pytest.mark.parametrize("norm_key", [None, LFM2_NORM])
def test_the_norm_key_names_the_final_norm_for_every_command(lfm2, capsys, norm_key):
    """``--verifier-norm-key`` reaches the hooks: evaluate's verifier reads LFM2's
    ``embedding_norm`` (its logits are the model's), found without the flag or
    named with it, and doctor, which builds the decoder on the meta device, finds
    it readable; named inside the layers, it is doctor's problem."""
    overrides = {"norm_key": norm_key}
    causal = load_causal_verifier(lfm2, [1, 3], weight_overrides=overrides)
    logits, aux = causal.forward(IDS, cache=None)
    want = _expected(lfm2, IDS, [1, 3])
    torch.testing.assert_close(aux, want.flatten(1))
    model = AutoModelForCausalLM.from_pretrained(lfm2, dtype=torch.float32)
    torch.testing.assert_close(logits, model(torch.tensor([IDS])).logits[0])

    def doctor(norm_key: str | None) -> list[dict]:
        flag = [] if norm_key is None else ["--verifier-norm-key", norm_key]
        cli.main(["doctor", str(lfm2), *flag, "--json"])
        return json.loads(capsys.readouterr().out)["problems"]

    assert doctor(norm_key) == []
    if norm_key is None:
        return
    (problem,) = doctor("model.layers.0.operator_norm.weight")
    assert "cannot read its hidden states" in problem["problem"]
    assert "operator_norm is a module of its decoder layers" in problem["problem"]
