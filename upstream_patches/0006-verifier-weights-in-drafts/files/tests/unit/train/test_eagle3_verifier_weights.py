"""EAGLE-3 drafts load verifier weights through the resolver (upstream call site)."""

import json

import pytest
import torch

from speculators.models.eagle3.core import Eagle3DraftModel
from speculators.utils.verifier_weights import VerifierWeightsError
from tests.unit.mock import verifier_checkpoints as vc
from tests.unit.mock import verifiers

DRAFT_VOCAB = 32


@pytest.mark.parametrize("name", ["llama", "qwen2_5_omni", "kimi_k25_sharded"])
def test_eagle3_loads_resolved_weights(tmp_path, name):
    entry = vc.ZOO[name](tmp_path)
    model = vc.eagle3_draft(entry.path, draft_vocab=DRAFT_VOCAB)
    mask = model.t2d
    assert torch.equal(model.embed_tokens.weight, entry.embed)
    assert torch.equal(model.verifier_lm_head.weight, entry.head[mask])
    assert torch.equal(model.lm_head.weight, entry.head[mask])
    norm_weight = entry.final_norm.weight
    assert isinstance(norm_weight, torch.Tensor)
    assert torch.equal(model.verifier_norm.weight, norm_weight)
    keys = model.config.speculators_config.verifier.weights
    assert keys is not None
    assert (keys.embed_key, keys.head_key, keys.norm_key) == (
        entry.embed_key,
        entry.head_key,
        entry.norm_key,
    )
    model.save_pretrained(tmp_path / "ckpt")
    saved = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    recorded = saved["speculators_config"]["verifier"]["weights"]
    assert recorded["head_key"] == entry.head_key


def test_override_is_saved_and_reloads_without_flags(tmp_path):
    """A verifier with two same-shaped decoders needs the prefix once, at training."""
    path = verifiers.llama(tmp_path / "two_decoders")
    vc.write_checkpoint(path, vc.with_second_decoder(vc.minimal_llama_tensors()))
    with pytest.raises(VerifierWeightsError, match="Ambiguous verifier decoder"):
        vc.eagle3_draft(path)
    model = vc.eagle3_draft(path, verifier_weight_prefix="other.model")
    keys = model.config.speculators_config.verifier.weights
    assert keys is not None
    assert keys.embed_key == "other.model.embed_tokens.weight"
    model.save_pretrained(tmp_path / "ckpt")
    reloaded = Eagle3DraftModel.from_pretrained(tmp_path / "ckpt")
    for name, tensor in model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[name], tensor), name
    assert reloaded.config.speculators_config.verifier.weights == (
        model.config.speculators_config.verifier.weights
    )


def test_eagle3_overrides_reach_loader(tmp_path):
    entry = vc.ZOO["llama"](tmp_path)
    with pytest.raises(VerifierWeightsError, match="--verifier-head-key"):
        vc.eagle3_draft(entry.path, verifier_head_key="model.missing.weight")


def test_override_flags_and_config_file(tmp_path):
    from speculators.train.config import TrainConfig  # noqa: PLC0415

    base = ["--data-path", "d", "--save-path", str(tmp_path / "s")]
    cfg = TrainConfig.resolve(
        [
            "--verifier-name-or-path",
            "v",
            "--verifier-weight-prefix",
            "language_model.model",
            "--verifier-head-key",
            "language_model.lm_head.weight",
            *base,
        ]
    )
    flat = cfg.flatten()
    assert flat["verifier_weight_prefix"] == "language_model.model"
    assert flat["verifier_head_key"] == "language_model.lm_head.weight"
    assert flat["verifier_embed_key"] is None
    config_file = tmp_path / "run.yaml"
    config_file.write_text(cfg.dump_yaml())
    again = TrainConfig.resolve(["--config", str(config_file)])
    assert again.verifier.verifier_head_key == "language_model.lm_head.weight"
    assert again.verifier.verifier_weight_prefix == "language_model.model"
