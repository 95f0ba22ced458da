import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from speculators.data_generation.provenance import (
    decoder_fingerprint,
    local_checkpoint_dir,
    provenance_metadata,
    read_provenance,
)
from tests.unit.mock import verifier_checkpoints

PREFIX = "language_model.model"


@pytest.fixture
def kimi(tmp_path):
    """Kimi-K2.5's Hub layout in four shards (embedding | layers 0-1 | rest |
    head and final norm) with a vision tower beside the decoder."""
    return verifier_checkpoints.kimi_k25_hub(tmp_path, sharded=True).path


def _shard_of(path, key):
    index = json.loads((path / "model.safetensors.index.json").read_text())
    return path / index["weight_map"][key]


def _edit(path, key, change):
    shard = _shard_of(path, key)
    tensors = load_file(shard)
    tensors[key] = change(tensors[key])
    save_file(tensors, shard)


def test_fingerprint_is_stable(kimi):
    assert decoder_fingerprint(kimi, PREFIX) == decoder_fingerprint(kimi, PREFIX)


@pytest.mark.parametrize(
    "key",
    [
        "language_model.model.embed_tokens.weight",
        "language_model.model.layers.1.mlp.experts.down_proj",
        "language_model.model.norm.weight",
    ],
)
def test_fingerprint_sees_every_decoder_tensor(kimi, key):
    before = decoder_fingerprint(kimi, PREFIX)
    _edit(kimi, key, lambda t: t + 1.0)
    assert decoder_fingerprint(kimi, PREFIX) != before


@pytest.mark.parametrize(
    "key", ["language_model.lm_head.weight", "mm_projector.proj.0.weight"]
)
def test_fingerprint_ignores_what_hidden_states_do_not_depend_on(kimi, key):
    before = decoder_fingerprint(kimi, PREFIX)
    _edit(kimi, key, lambda t: t + 1.0)
    assert decoder_fingerprint(kimi, PREFIX) == before


def test_fingerprint_sees_the_text_config_not_where_it_was_read(kimi):
    before = decoder_fingerprint(kimi, PREFIX)
    config = json.loads((kimi / "config.json").read_text())
    config["text_config"]["_name_or_path"] = "/somewhere/else"
    (kimi / "config.json").write_text(json.dumps(config))
    assert decoder_fingerprint(kimi, PREFIX) == before
    config["text_config"]["rms_norm_eps"] = 0.5
    (kimi / "config.json").write_text(json.dumps(config))
    assert decoder_fingerprint(kimi, PREFIX) != before


def test_missing_decoder_shard_is_named(kimi):
    shard = _shard_of(kimi, "language_model.model.layers.0.input_layernorm.weight")
    shard.unlink()
    with pytest.raises(FileNotFoundError, match=shard.name):
        decoder_fingerprint(kimi, PREFIX)


def test_provenance_round_trip(tmp_path):
    path = tmp_path / "hs_0.safetensors"
    meta = provenance_metadata("abc", "org/model", [1, 2, 3])
    save_file({"hidden_states": torch.zeros(2, 4, 8)}, path, metadata=meta)
    assert read_provenance(path) == {
        "verifier": "org/model",
        "verifier_fingerprint": "abc",
        "target_layer_ids": [1, 2, 3],
    }
    save_file({"hidden_states": torch.zeros(2, 4, 8)}, path)
    assert read_provenance(path) is None


def test_local_checkpoint_dir(kimi, tmp_path):
    assert local_checkpoint_dir(kimi) == kimi
    assert local_checkpoint_dir("org/never-downloaded-xyz") is None
