"""Verifier weights found and loaded on tiny checkpoints in the key layouts of the
Hub: the tensors the verifier itself uses, bit for bit."""

import json

import pytest
import torch

from speculators.utils.loading import load_model_layers
from speculators.utils.verifier_weights import (
    VerifierWeightsError,
    load_verifier_tensors,
    resolve_verifier_weights,
)
from tests.unit.mock import verifier_checkpoints as vc


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> dict[str, vc.Zoo]:
    return vc.build_zoo(tmp_path_factory.mktemp("zoo"))


@pytest.mark.parametrize("name", list(vc.ZOO))
def test_zoo_keys_and_tensors_bit_equal(zoo, name):
    entry = zoo[name]
    spec = resolve_verifier_weights(entry.path)
    assert spec.embed.key == entry.embed_key
    assert spec.head.key == entry.head_key
    assert spec.norm is not None
    assert spec.norm.key == entry.norm_key
    tensors = load_verifier_tensors(spec)
    assert tensors.embed is not None
    assert tensors.norm_weight is not None
    assert torch.equal(tensors.embed, entry.embed)
    assert torch.equal(tensors.head, entry.head)
    assert torch.equal(tensors.norm_weight, entry.final_norm.weight)


def test_upstream_loader_picks_wrong_tensors(zoo):
    """The suffix matcher this unit replaces: documents the failures it fixes."""
    falcon = load_model_layers(["model.norm.weight"], str(zoo["falcon"].path))
    assert not torch.equal(falcon["model.norm.weight"], zoo["falcon"].final_norm.weight)


def test_only_candidate_shards_are_opened(zoo, tmp_path):
    entry = zoo["kimi_k25_sharded"]
    copy = tmp_path / "kimi"
    copy.mkdir()
    for item in entry.path.iterdir():
        (copy / item.name).symlink_to(item)
    spec = resolve_verifier_weights(entry.path)
    unused = {f.name for f in copy.glob("*.safetensors") if f.name not in spec.shards}
    assert unused
    for name in unused:
        (copy / name).unlink()
    again = resolve_verifier_weights(copy)
    assert again.shards == spec.shards
    assert torch.equal(load_verifier_tensors(again).head, entry.head)


def test_overrides(zoo):
    entry = zoo["qwen2_5_omni"]
    spec = resolve_verifier_weights(entry.path, prefix="thinker.model")
    assert spec.head.key == "thinker.lm_head.weight"
    spec = resolve_verifier_weights(
        entry.path,
        embed_key="thinker.model.embed_tokens.weight",
        head_key="thinker.lm_head.weight",
        norm_key="thinker.model.norm.weight",
    )
    assert spec.norm is not None
    assert spec.norm.key == "thinker.model.norm.weight"
    # An embedding override alone anchors the head / norm search.
    hub = zoo["kimi_k25_hub"]
    spec = resolve_verifier_weights(hub.path, embed_key=hub.embed_key)
    assert spec.norm is not None
    assert (spec.head.key, spec.norm.key) == (hub.head_key, hub.norm_key)


def test_tied_head_named_by_its_embedding_key(zoo):
    entry = zoo["qwen3_tied"]
    spec = resolve_verifier_weights(entry.path)
    assert spec.tied
    again = resolve_verifier_weights(
        entry.path, embed_key=spec.embed.key, head_key=spec.embed.key
    )
    assert again.tied
    assert torch.equal(load_verifier_tensors(again).head, entry.head)


def test_error_missing_shard(zoo, tmp_path):
    entry = zoo["kimi_k25_sharded"]
    spec = resolve_verifier_weights(entry.path)
    copy = tmp_path / "kimi"
    copy.mkdir()
    for item in entry.path.iterdir():
        if item.name != spec.embed.shard:
            (copy / item.name).symlink_to(item)
    with pytest.raises(VerifierWeightsError, match="shard file missing") as err:
        resolve_verifier_weights(copy)
    assert spec.embed.shard in str(err.value)


def test_error_index_names_missing_key(zoo, tmp_path):
    entry = zoo["kimi_k25_sharded"]
    copy = tmp_path / "kimi"
    copy.mkdir()
    for item in entry.path.iterdir():
        if item.name != "model.safetensors.index.json":
            (copy / item.name).symlink_to(item)
    index = json.loads((entry.path / "model.safetensors.index.json").read_text())
    index["weight_map"]["language_model.lm_head.weight"] = (
        "model-00001-of-00004.safetensors"
    )
    (copy / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(VerifierWeightsError, match="has no tensor 'language_model"):
        resolve_verifier_weights(copy)
