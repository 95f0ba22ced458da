"""Prefix-aware, shape-validated resolution and loading of verifier weights."""

import json
import struct
from pathlib import Path

import pytest
import torch
from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from speculators.utils.loading import load_model_layers
from speculators.utils.verifier_weights import (
    VERIFIER_WEIGHTS_FILENAME,
    VerifierWeightsError,
    build_verifier_norm,
    load_verifier_norm,
    load_verifier_tensors,
    read_safetensors_header,
    resolve_verifier_weights,
    write_verifier_weights_record,
)
from tests.unit import verifier_checkpoints as vc
from tests.unit import verifiers


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> dict[str, vc.Zoo]:
    tmp = tmp_path_factory.mktemp("zoo")
    return {name: build(tmp) for name, build in vc.ZOO.items()}


@pytest.mark.parametrize("name", list(vc.ZOO))
def test_zoo_keys_and_tensors_bit_equal(zoo, name):
    entry = zoo[name]
    spec = resolve_verifier_weights(entry.path)
    assert spec.embed.key == entry.embed_key
    assert spec.head.key == entry.head_key
    assert spec.norm is not None
    assert spec.norm.key == entry.norm_key
    tensors = load_verifier_tensors(spec)
    assert torch.equal(tensors.embed, entry.embed)
    assert torch.equal(tensors.head, entry.head)
    assert torch.equal(tensors.norm_weight, entry.final_norm.weight)
    if getattr(entry.final_norm, "bias", None) is not None:
        assert torch.equal(tensors.norm_bias, entry.final_norm.bias)


@pytest.mark.parametrize("name", list(vc.ZOO))
@pytest.mark.parametrize("draft_norm", ["plain", "gemma"])
def test_verifier_norm_reproduces_final_norm(zoo, name, draft_norm):
    """verifier_norm(h) == the verifier's own final norm(h), any convention."""
    entry = zoo[name]
    spec = resolve_verifier_weights(entry.path)
    tensors = load_verifier_tensors(spec)
    owner = torch.nn.Module()
    norm_class = LlamaRMSNorm if draft_norm == "plain" else Gemma3RMSNorm
    owner.verifier_norm = norm_class(spec.hidden_size, eps=spec.norm_eps)
    load_verifier_norm(owner, spec, tensors)
    torch.manual_seed(3)
    hidden = torch.randn(2, 5, spec.hidden_size)
    with torch.no_grad():
        expected = entry.final_norm(hidden)
        got = owner.verifier_norm(hidden)
    if draft_norm == "plain" or spec.norm_kind != "rms":
        assert torch.equal(got, expected)
    else:
        # A Gemma-style draft module gets w - 1: equal up to float rounding.
        torch.testing.assert_close(got, expected)
    assert not any(p.requires_grad for p in owner.verifier_norm.parameters())


def test_gemma_style_norm_is_converted(zoo):
    spec = resolve_verifier_weights(zoo["gemma3"].path)
    assert spec.norm_kind == "gemma_rms"
    assert spec.tied
    tensors = load_verifier_tensors(spec)
    module = build_verifier_norm(spec)
    owner = torch.nn.Module()
    owner.verifier_norm = module
    load_verifier_norm(owner, spec, tensors)
    assert torch.equal(module.weight, 1.0 + tensors.norm_weight.float())


def test_layernorm_family_norm(zoo):
    for name, bias in (("falcon", True), ("gpt_neox", True), ("mpt", False)):
        spec = resolve_verifier_weights(zoo[name].path)
        assert spec.norm_kind == "layernorm"
        assert (spec.norm_bias is not None) is bias


def test_upstream_loader_picks_wrong_tensors(zoo):
    """The suffix matcher this unit replaces: documents the failures it fixes."""
    falcon = load_model_layers(["model.norm.weight"], str(zoo["falcon"].path))
    assert not torch.equal(falcon["model.norm.weight"], zoo["falcon"].final_norm.weight)


def test_draft_vocab_reads_selected_rows_only(zoo):
    entry = zoo["kimi_k25_sharded"]
    spec = resolve_verifier_weights(entry.path)
    assert spec.embed.shard != spec.head.shard
    mask = torch.zeros(verifiers.VOCAB, dtype=torch.bool)
    mask[
        torch.randperm(verifiers.VOCAB, generator=torch.Generator().manual_seed(0))[:40]
    ] = True
    tensors = load_verifier_tensors(spec, head_rows=mask)
    assert torch.equal(tensors.head, entry.head[mask])
    ids = torch.tensor([5, 200, 3, 4095 % verifiers.VOCAB])
    tensors = load_verifier_tensors(spec, head_rows=ids, load_norm=False)
    assert torch.equal(tensors.head, entry.head[ids])
    assert tensors.norm_weight is None


def test_reads_only_needed_shards(zoo, tmp_path):
    entry = zoo["kimi_k25_sharded"]
    copy = tmp_path / "kimi"
    copy.mkdir()
    for item in entry.path.iterdir():
        (copy / item.name).symlink_to(item)
    spec = resolve_verifier_weights(copy)
    unused = {f.name for f in copy.glob("*.safetensors") if f.name not in spec.shards}
    assert unused
    for name in unused:
        (copy / name).unlink()
    tensors = load_verifier_tensors(spec)
    assert torch.equal(tensors.head, entry.head)


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
    assert (spec.head.key, spec.norm.key) == (hub.head_key, hub.norm_key)


def test_record_is_written(zoo, tmp_path):
    spec = resolve_verifier_weights(zoo["llama"].path)
    model = torch.nn.Module()
    model.verifier_weight_resolution = spec.to_dict()
    path = write_verifier_weights_record(model, tmp_path / "0")
    assert path is not None
    assert path.name == VERIFIER_WEIGHTS_FILENAME
    record = json.loads(path.read_text())
    assert record["embed"]["key"] == "model.embed_tokens.weight"
    assert record["overrides"]["verifier_head_key"] == "lm_head.weight"


# ------------------------------------------------------------------ errors


def _flat(tmp_path: Path, tensors: dict[str, torch.Tensor], **config) -> Path:
    path = verifiers.llama(tmp_path / "ckpt")
    if config:
        data = json.loads((path / "config.json").read_text())
        data.update(config)
        (path / "config.json").write_text(json.dumps(data))
    vc.write_checkpoint(path, tensors)
    return path


def _minimal(vocab: int = verifiers.VOCAB) -> dict[str, torch.Tensor]:
    hidden = verifiers.HIDDEN
    out = {
        "model.embed_tokens.weight": torch.randn(vocab, hidden),
        "lm_head.weight": torch.randn(verifiers.VOCAB, hidden),
        "model.norm.weight": torch.ones(hidden),
    }
    for i in range(verifiers.LAYERS):
        out[f"model.layers.{i}.input_layernorm.weight"] = torch.ones(hidden)
    return out


def test_error_missing_shard(zoo, tmp_path):
    entry = zoo["kimi_k25_sharded"]
    copy = tmp_path / "kimi"
    copy.mkdir()
    for item in entry.path.iterdir():
        if not item.name.startswith("model-00004"):
            (copy / item.name).symlink_to(item)
    with pytest.raises(VerifierWeightsError, match="shard file missing.*00004"):
        resolve_verifier_weights(copy)


def test_error_corrupt_header(tmp_path):
    path = _flat(tmp_path, _minimal())
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[:100])
    with pytest.raises(VerifierWeightsError, match="Corrupt or truncated"):
        resolve_verifier_weights(path)
    (path / "model.safetensors").write_bytes(struct.pack("<Q", 10) + b"not json!!")
    with pytest.raises(VerifierWeightsError, match="Corrupt safetensors header"):
        read_safetensors_header(path / "model.safetensors")


def test_error_truncated_data(tmp_path):
    path = _flat(tmp_path, _minimal())
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[:-64])
    with pytest.raises(VerifierWeightsError, match="Truncated"):
        resolve_verifier_weights(path)


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


def test_error_shape_contradicts_config(tmp_path):
    tensors = _minimal()
    tensors["lm_head.weight"] = torch.randn(verifiers.VOCAB + 2, verifiers.HIDDEN)
    with pytest.raises(VerifierWeightsError, match="output head.*contradicts"):
        resolve_verifier_weights(_flat(tmp_path, tensors))


def test_error_ambiguous(tmp_path):
    tensors = _minimal()
    tensors["output.weight"] = torch.randn(verifiers.VOCAB, verifiers.HIDDEN)
    with pytest.raises(VerifierWeightsError, match="Ambiguous.*lm_head.*output") as err:
        resolve_verifier_weights(_flat(tmp_path, tensors))
    assert "--verifier-head-key" in str(err.value)
    assert "model.safetensors" in str(err.value)


def test_error_ambiguous_decoders(tmp_path):
    tensors = _minimal()
    for key, value in list(tensors.items()):
        if key.startswith("model."):
            tensors["other." + key] = value.clone()
    with pytest.raises(VerifierWeightsError, match="Ambiguous verifier decoder") as err:
        resolve_verifier_weights(_flat(tmp_path, tensors))
    assert "--verifier-weight-prefix" in str(err.value)
    assert "other.model" in str(err.value)


def test_error_no_candidate(tmp_path):
    tensors = _minimal(vocab=verifiers.VOCAB * 2)
    with pytest.raises(VerifierWeightsError, match="No decoder"):
        resolve_verifier_weights(_flat(tmp_path, tensors))


def test_error_untied_without_head(tmp_path):
    tensors = _minimal()
    del tensors["lm_head.weight"]
    with pytest.raises(VerifierWeightsError, match="tie_word_embeddings=False"):
        resolve_verifier_weights(_flat(tmp_path, tensors, tie_word_embeddings=False))


def test_error_override_names_missing_key(zoo):
    path = zoo["llama"].path
    with pytest.raises(VerifierWeightsError, match="--verifier-head-key.*no such"):
        resolve_verifier_weights(path, head_key="model.lm_head.weight")
    with pytest.raises(VerifierWeightsError, match="--verifier-embed-key"):
        resolve_verifier_weights(path, embed_key="embed_tokens.weight")
    with pytest.raises(VerifierWeightsError, match="--verifier-norm-key"):
        resolve_verifier_weights(path, norm_key="model.final_norm.weight")
    with pytest.raises(VerifierWeightsError, match="--verifier-weight-prefix"):
        resolve_verifier_weights(path, prefix="language_model.model")


def test_error_packed_head(tmp_path):
    tensors = _minimal()
    del tensors["lm_head.weight"]
    tensors["lm_head.weight_packed"] = torch.zeros(
        verifiers.VOCAB, verifiers.HIDDEN // 8, dtype=torch.int32
    )
    tensors["lm_head.weight_scale"] = torch.ones(verifiers.VOCAB, 1)
    with pytest.raises(VerifierWeightsError, match="packed quantized"):
        resolve_verifier_weights(_flat(tmp_path, tensors, tie_word_embeddings=True))


def test_error_int_head(tmp_path):
    tensors = _minimal()
    tensors["lm_head.weight"] = torch.zeros(
        verifiers.VOCAB, verifiers.HIDDEN, dtype=torch.int8
    )
    with pytest.raises(VerifierWeightsError, match="quantized format"):
        resolve_verifier_weights(_flat(tmp_path, tensors))


def test_error_nan(tmp_path):
    tensors = _minimal()
    tensors["model.norm.weight"][3] = float("nan")
    spec = resolve_verifier_weights(_flat(tmp_path, tensors))
    with pytest.raises(VerifierWeightsError, match="'model.norm.weight'.*NaN"):
        load_verifier_tensors(spec)


def test_fp8_block_scaled_head(tmp_path):
    vocab, hidden = 300, 160
    torch.manual_seed(0)
    reference = torch.randn(vocab, hidden)
    scale = torch.rand(3, 2) + 0.5
    expanded = scale.repeat_interleave(128, 0)[:vocab].repeat_interleave(128, 1)
    fp8 = (reference / expanded[:, :hidden]).to(torch.float8_e4m3fn)
    tensors = {
        "model.embed_tokens.weight": torch.randn(vocab, hidden),
        "lm_head.weight": fp8,
        "lm_head.weight_scale_inv": scale,
        "model.norm.weight": torch.ones(hidden),
    }
    tensors.update(
        {f"model.layers.{i}.x.weight": torch.ones(1) for i in range(verifiers.LAYERS)}
    )
    path = _flat(tmp_path, tensors, vocab_size=vocab, hidden_size=hidden)
    spec = resolve_verifier_weights(path)
    assert spec.quantization is not None
    expected = fp8.float() * expanded[:, :hidden]
    assert torch.equal(load_verifier_tensors(spec).head, expected)
    rows = torch.tensor([0, 129, 299, 7])
    assert torch.equal(load_verifier_tensors(spec, head_rows=rows).head, expected[rows])


def test_bf16_rows_any_order_and_repeats(tmp_path):
    tensors = _minimal()
    tensors["lm_head.weight"] = torch.randn(verifiers.VOCAB, verifiers.HIDDEN).to(
        torch.bfloat16
    )
    spec = resolve_verifier_weights(_flat(tmp_path, tensors))
    rows = torch.tensor([9, 3, 4, 5, 9, 255, 0])
    head = load_verifier_tensors(spec, head_rows=rows).head
    assert head.dtype == torch.bfloat16
    assert torch.equal(head, tensors["lm_head.weight"][rows])


def test_load_into_destinations_single_copy(zoo):
    """out= fills the given tensors in place (any dtype) and returns them."""
    entry = zoo["kimi_k25_sharded"]
    spec = resolve_verifier_weights(entry.path)
    mask = torch.zeros(verifiers.VOCAB, dtype=torch.bool)
    mask[::3] = True
    embed = torch.full_like(entry.embed, float("nan"))
    head = torch.full((int(mask.sum()), verifiers.HIDDEN), float("nan"))
    head = head.to(torch.float64)  # a different dtype: converted chunk by chunk
    tensors = load_verifier_tensors(
        spec, head_rows=mask, out={"embed": embed, "head": head}
    )
    assert tensors.embed is embed
    assert tensors.head is head
    assert torch.equal(embed, entry.embed)
    assert torch.equal(head, entry.head[mask].to(torch.float64))
    skipped = load_verifier_tensors(spec, head_rows=mask, load_embed=False)
    assert skipped.embed is None
    assert torch.equal(skipped.head, entry.head[mask])
    with pytest.raises(VerifierWeightsError, match="Destination.*shape"):
        load_verifier_tensors(spec, out={"embed": torch.empty(3, 3)})


@pytest.mark.parametrize(
    "dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64]
)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_error_nonfinite_embed_names_key(tmp_path, dtype, bad):
    tensors = _minimal()
    embed = torch.randn(verifiers.VOCAB, verifiers.HIDDEN).to(dtype)
    embed[verifiers.VOCAB - 1, 2] = bad
    tensors["model.embed_tokens.weight"] = embed
    spec = resolve_verifier_weights(_flat(tmp_path, tensors))
    with pytest.raises(VerifierWeightsError, match="'model.embed_tokens.weight'.*NaN"):
        load_verifier_tensors(spec)
    with pytest.raises(VerifierWeightsError, match="'model.embed_tokens.weight'.*NaN"):
        load_verifier_tensors(spec, out={"embed": torch.empty_like(embed).float()})


def test_bit_level_finite_check_is_exact():
    from speculators.utils.verifier_weights import _bits_finite  # noqa: PLC0415

    for dtype in (torch.bfloat16, torch.float16):
        values = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
        values = values.view(dtype)
        raw = values.view(torch.uint8).numpy()
        got = [_bits_finite(raw[2 * i : 2 * i + 2], dtype) for i in range(65536)]
        assert got == torch.isfinite(values.float()).tolist()
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        values = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype)
        raw = values.view(torch.uint8).numpy()
        got = [_bits_finite(raw[i : i + 1], dtype) for i in range(256)]
        assert got == torch.isfinite(values.float()).tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_has_nan_matches_isnan_any_in_every_piece(monkeypatch, dtype):
    from speculators.utils import verifier_weights  # noqa: PLC0415

    # Small pieces so a 1000-element tensor spans the probe and several pieces.
    monkeypatch.setattr(verifier_weights, "_NAN_PROBE_ELEMENTS", 16)
    monkeypatch.setattr(verifier_weights, "_NAN_PIECE_ELEMENTS", 100)
    base = torch.randn(10, 100).to(dtype)
    assert not verifier_weights.has_nan(base)
    for flat_index in (0, 15, 16, 115, 116, 999):
        tensor = base.clone()
        tensor.view(-1)[flat_index] = float("nan")
        assert verifier_weights.has_nan(tensor), flat_index
        assert verifier_weights.has_nan(tensor.t()), flat_index  # non-contiguous
    assert not verifier_weights.has_nan(base.masked_fill(base > 0, float("inf")))
    assert verifier_weights.has_nan(torch.full((3, 3), float("nan"), dtype=dtype))
    assert not verifier_weights.has_nan(torch.empty(0, dtype=dtype))
    assert not verifier_weights.has_nan(torch.arange(10))


def test_error_blames_a_defaulted_size_not_the_weights(tmp_path):
    # config.json without vocab_size: LlamaConfig's default (32000) stands in and
    # contradicts the weights; the advice is to set it, not to fix the weights.
    path = _flat(tmp_path, _minimal())
    data = json.loads((path / "config.json").read_text())
    del data["vocab_size"]
    (path / "config.json").write_text(json.dumps(data))
    with pytest.raises(VerifierWeightsError) as err:
        resolve_verifier_weights(path)
    message = str(err.value)
    assert "does not set vocab_size (so LlamaConfig's default 32000 was used)" in (
        message
    )
    assert "add the value the weights have" in message
    assert "Check that the text config matches" not in message
