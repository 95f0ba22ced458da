"""The resolver's exact keys for the verifier's embedding, head and final norm,
and its errors: each names the candidates and the way out."""

import json

import pytest
import torch

from speculators.utils.verifier_weights import (
    VerifierWeightsError,
    resolve_verifier_weights,
)
from tests.unit.mock import verifier_checkpoints as vc
from tests.unit.mock import verifiers


def test_flat_and_nested_keys(tmp_path):
    tensors = vc.minimal_llama_tensors()
    spec = resolve_verifier_weights(vc.llama_checkpoint(tmp_path / "flat", tensors))
    assert spec.norm is not None
    assert (spec.prefix, spec.embed.key, spec.head.key, spec.norm.key) == (
        "model",
        "model.embed_tokens.weight",
        "lm_head.weight",
        "model.norm.weight",
    )
    assert spec.embed.shape == (verifiers.VOCAB, verifiers.HIDDEN)
    assert spec.embed.dtype == "F32"
    nested = {
        key.replace("model.", "language_model.model.", 1).replace(
            "lm_head.", "language_model.lm_head.", 1
        ): value
        for key, value in vc.with_second_decoder(tensors).items()
        if not key.startswith("other.")
    }
    nested["vision_tower.embeddings.weight"] = torch.randn(7, verifiers.HIDDEN)
    spec = resolve_verifier_weights(vc.llama_checkpoint(tmp_path / "nested", nested))
    assert spec.prefix == "language_model.model"
    assert spec.head.key == "language_model.lm_head.weight"


def test_overrides_name_keys_or_prefix(tmp_path):
    path = vc.llama_checkpoint(
        tmp_path / "ckpt", vc.with_second_decoder(vc.minimal_llama_tensors())
    )
    spec = resolve_verifier_weights(path, prefix="other.model")
    assert spec.embed.key == "other.model.embed_tokens.weight"
    assert spec.norm is not None
    assert spec.norm.key == "other.model.norm.weight"
    spec = resolve_verifier_weights(
        path, embed_key="model.embed_tokens.weight", head_key="lm_head.weight"
    )
    assert spec.norm is not None
    assert spec.norm.key == "model.norm.weight"
    with pytest.raises(VerifierWeightsError, match="--verifier-head-key.*no such"):
        resolve_verifier_weights(path, prefix="model", head_key="model.lm_head.weight")
    with pytest.raises(VerifierWeightsError, match="--verifier-embed-key"):
        resolve_verifier_weights(path, embed_key="embed_tokens.weight")
    with pytest.raises(VerifierWeightsError, match="--verifier-norm-key"):
        resolve_verifier_weights(path, prefix="model", norm_key="model.final.weight")
    with pytest.raises(VerifierWeightsError, match="--verifier-weight-prefix"):
        resolve_verifier_weights(path, prefix="language_model.model")


def test_error_corrupt_header(tmp_path):
    path = vc.llama_checkpoint(tmp_path / "ckpt", vc.minimal_llama_tensors())
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[:100])
    with pytest.raises(VerifierWeightsError, match="Corrupt or truncated"):
        resolve_verifier_weights(path)
    (path / "model.safetensors").write_bytes(b"\x0a" + bytes(7) + b"not json!!")
    with pytest.raises(VerifierWeightsError, match="Corrupt or truncated.*Re-down"):
        resolve_verifier_weights(path)


def test_error_truncated_data(tmp_path):
    path = vc.llama_checkpoint(tmp_path / "ckpt", vc.minimal_llama_tensors())
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[:-64])
    with pytest.raises(VerifierWeightsError, match="truncated.*model.safetensors"):
        resolve_verifier_weights(path)


def test_error_shape_contradicts_config(tmp_path):
    tensors = vc.minimal_llama_tensors()
    tensors["lm_head.weight"] = torch.randn(verifiers.VOCAB + 2, verifiers.HIDDEN)
    with pytest.raises(VerifierWeightsError, match="output head.*contradicts"):
        resolve_verifier_weights(vc.llama_checkpoint(tmp_path / "ckpt", tensors))


def test_error_ambiguous(tmp_path):
    tensors = vc.minimal_llama_tensors()
    tensors["output.weight"] = torch.randn(verifiers.VOCAB, verifiers.HIDDEN)
    with pytest.raises(VerifierWeightsError, match="Ambiguous.*lm_head.*output") as err:
        resolve_verifier_weights(vc.llama_checkpoint(tmp_path / "ckpt", tensors))
    assert "--verifier-head-key" in str(err.value)
    assert "model.safetensors" in str(err.value)


def test_error_ambiguous_decoders(tmp_path):
    tensors = vc.with_second_decoder(vc.minimal_llama_tensors())
    with pytest.raises(VerifierWeightsError, match="Ambiguous verifier decoder") as err:
        resolve_verifier_weights(vc.llama_checkpoint(tmp_path / "ckpt", tensors))
    assert "--verifier-weight-prefix" in str(err.value)
    assert "other.model" in str(err.value)


def test_error_no_candidate(tmp_path):
    tensors = vc.minimal_llama_tensors(vocab=verifiers.VOCAB * 2)
    with pytest.raises(VerifierWeightsError, match="No decoder"):
        resolve_verifier_weights(vc.llama_checkpoint(tmp_path / "ckpt", tensors))


def test_error_untied_without_head(tmp_path):
    tensors = vc.minimal_llama_tensors()
    del tensors["lm_head.weight"]
    with pytest.raises(VerifierWeightsError, match="tie_word_embeddings=False"):
        resolve_verifier_weights(
            vc.llama_checkpoint(tmp_path / "ckpt", tensors, tie_word_embeddings=False)
        )


def test_error_packed_head(tmp_path):
    tensors = vc.minimal_llama_tensors()
    del tensors["lm_head.weight"]
    tensors["lm_head.weight_packed"] = torch.zeros(
        verifiers.VOCAB, verifiers.HIDDEN // 8, dtype=torch.int32
    )
    tensors["lm_head.weight_scale"] = torch.ones(verifiers.VOCAB, 1)
    with pytest.raises(VerifierWeightsError, match="packed quantized"):
        resolve_verifier_weights(
            vc.llama_checkpoint(tmp_path / "ckpt", tensors, tie_word_embeddings=True)
        )


def test_error_int_head(tmp_path):
    tensors = vc.minimal_llama_tensors()
    tensors["lm_head.weight"] = torch.zeros(
        verifiers.VOCAB, verifiers.HIDDEN, dtype=torch.int8
    )
    with pytest.raises(VerifierWeightsError, match="quantized format"):
        resolve_verifier_weights(vc.llama_checkpoint(tmp_path / "ckpt", tensors))


def test_error_blames_a_defaulted_size_not_the_weights(tmp_path):
    # config.json without vocab_size: LlamaConfig's default (32000) stands in and
    # contradicts the weights; the advice is to set it, not to fix the weights.
    path = vc.llama_checkpoint(tmp_path / "ckpt", vc.minimal_llama_tensors())
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


def test_hyper_connection_verifier_is_refused_with_its_reason(tmp_path):
    # DeepSeek-V4: hc_mult streams per layer, mixed by hc_head before the final
    # norm and head.weight. Refused from its config, before any weight is read.
    deepseek_v4 = verifiers.transformers_class("DeepseekV4Config")
    deepseek_v4(**verifiers.SIZES, hc_mult=2).save_pretrained(tmp_path)
    says = r"\(deepseek_v4\).* hc_mult=2 hyper-connection streams .*\(head\.weight\)"
    with pytest.raises(VerifierWeightsError, match=says):
        resolve_verifier_weights(tmp_path)


def test_qwen4_exp_hyper_connections_are_refused_with_their_reason(tmp_path):
    # Qwen4-Exp: hc_count streams of the layers' hidden size, flattened; its
    # hyper_connection_mixer (own norm over the streams) is all it has for a final
    # norm, so the plain search would answer "no final norm" and ask for a key.
    qwen4_exp = verifiers.transformers_class("Qwen4ExpTextConfig")
    qwen4_exp(**verifiers.SIZES, hc_count=4).save_pretrained(tmp_path)
    says = (
        r"\(qwen4_exp_text\).* hc_count=4 hyper-connection streams .*"
        r"hyper_connection_mixer.*\(lm_head\.weight\)"
    )
    with pytest.raises(VerifierWeightsError, match=says):
        resolve_verifier_weights(tmp_path)
