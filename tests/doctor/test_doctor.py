"""`speculators-kimi doctor`: reports a verifier without loading tensors
(unless ``--check-values``, which counts NaN/inf in the tensors the draft uses).

Run with the patched package on the path:
``PYTHONPATH=/tmp/unit-weights/src:/work/main pytest tests/doctor/test_doctor.py``
(or with speculators-kimi installed).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from helpers import doctor_report, parameter_counts

torch = pytest.importorskip("torch")
if TYPE_CHECKING:
    from torch import Tensor
safetensors_torch = pytest.importorskip("safetensors.torch")
pytest.importorskip("speculators.utils.verifier_weights")

from speculators_kimi import cli  # noqa: E402
from speculators_kimi.tiny_verifier import (  # noqa: E402
    HEAD_KEY,
    KimiTinySpec,
    gemma3_config,
    mla_text,
    remote_code,
    write_checkpoint,
    write_kimi_k25_skeleton,
    write_skeleton,
)

HIDDEN, VOCAB, LAYERS = 64, 256, 8
#: Kimi-K2.5's text model at tiny sizes; v_head_dim differs from hidden / heads
#: and from qk_nope + qk_rope, so the draft's MLA head dim is unmistakable.
SPEC = KimiTinySpec(hidden_size=HIDDEN, num_words=VOCAB - 8, num_layers=LAYERS)


def kimi_hub(path: Path, head: dict | None = None, norm: Tensor | None = None) -> Path:
    """Kimi-K2.5 as the Hub ships it: remote-code config, language_model.* keys."""
    classes = {"AutoConfig": "configuration_kimi.KimiK25Config"}
    auto_map = remote_code(path, path.parent / "imported", classes)
    text = mla_text(
        SPEC,
        v_head_dim=32,
        quantization_config={
            "quant_method": "compressed-tensors",
            "format": "pack-quantized",
        },
    )
    return write_kimi_k25_skeleton(path, text, head=head, norm=norm, auto_map=auto_map)


def gemma3_text(path: Path) -> Path:
    """Gemma-3 in transformers-5's ``model.language_model.`` layout, tied head."""
    vision = {"model.vision_tower.vision_model.post_layernorm.weight": torch.ones(32)}
    return write_skeleton(
        path,
        {**gemma3_config(), "architectures": ["Gemma3ForConditionalGeneration"]},
        prefix="model.language_model",
        head_key=None,
        decoys=vision,
        norm=torch.zeros(HIDDEN),
        sharded=False,
    )


def test_healthy_kimi_hub_report(tmp_path, capsys):
    path = kimi_hub(tmp_path / "kimi")
    code, report = doctor_report(capsys, str(path))
    assert code == 0, report["problems"]
    assert report["ok"]
    assert report["text_config"]["found_at"] == "text_config"
    assert report["text_config"]["hidden_size"] == HIDDEN
    assert report["text_config"]["hybrid"] is False
    weights = report["weights"]
    assert weights["prefix"] == "language_model.model"
    assert weights["embed"]["key"] == "language_model.model.embed_tokens.weight"
    assert weights["embed"]["shape"] == [VOCAB, HIDDEN]
    assert weights["embed"]["shard"] == "model-00001-of-00003.safetensors"
    assert weights["head"]["key"] == "language_model.lm_head.weight"
    assert weights["head"]["shard"] == "model-00003-of-00003.safetensors"
    assert weights["norm"]["key"] == "language_model.model.norm.weight"
    assert weights["tied"] is False
    assert any("compressed-tensors" in q for q in report["quantization"])
    assert report["target_layer_ids"] == [2, LAYERS // 2, LAYERS - 3]
    assert report["draft_config"]["head_dim"] == 32  # MLA: v_head_dim
    assert report["draft_config"]["draft_vocab_size"] == VOCAB
    assert report["estimated_memory"]["total_gib"] > 0
    # Config read as data: the checkpoint's code never ran.
    assert not (tmp_path / "imported").exists()


def _mla_layer_params(c: dict, num_aux: int = 3) -> int:
    """Trainable parameters of a one-layer MLA EAGLE-3 draft, by hand."""
    h, heads = c["hidden_size"], c["num_attention_heads"]
    qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    attention = (
        2 * h * c["q_lora_rank"]  # q_a_proj reads cat([embeds, hidden])
        + c["q_lora_rank"]  # q_a_layernorm
        + c["q_lora_rank"] * heads * qk  # q_b_proj
        + 2 * h * (c["kv_lora_rank"] + c["qk_rope_head_dim"])  # kv_a_proj_with_mqa
        + c["kv_lora_rank"]  # kv_a_layernorm
        + c["kv_lora_rank"] * heads * (c["qk_nope_head_dim"] + c["v_head_dim"])
        + heads * c["v_head_dim"] * h  # o_proj
    )
    mlp = 3 * h * c["intermediate_size"]
    norms = 3 * h  # input, hidden, post-attention
    return attention + mlp + norms + num_aux * h * h + h  # + fc, final norm


def test_mla_draft_config_and_estimate(tmp_path, capsys):
    path = kimi_hub(tmp_path / "kimi")
    text = json.loads((path / "config.json").read_text())["text_config"]
    code, llama = doctor_report(capsys, str(path))
    code_mla, mla = doctor_report(capsys, str(path), "--draft-arch", "deepseek_v3")
    assert code == code_mla == 0, mla["problems"]
    draft = mla["draft_config"]
    assert draft["model_type"] == "deepseek_v3"
    for name in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim"):
        assert draft[name] == text[name], name
    assert (draft["qk_rope_head_dim"], draft["v_head_dim"]) == (
        text["qk_rope_head_dim"],
        32,
    )
    assert mla["estimated_memory"]["trainable_params"] == _mla_layer_params(draft)
    assert (
        mla["estimated_memory"]["trainable_params"]
        != llama["estimated_memory"]["trainable_params"]
    )
    assert "q_lora_rank" not in llama["draft_config"]
    cli.main(["doctor", str(path), "--draft-arch", "deepseek_v3"])
    out = capsys.readouterr().out
    assert "model_type=deepseek_v3" in out
    assert "kv_lora_rank=" in out


def test_text_output(tmp_path, capsys):
    path = kimi_hub(tmp_path / "kimi")
    assert cli.main(["doctor", str(path)]) == 0
    out = capsys.readouterr().out
    assert "decoder prefix: 'language_model.model'" in out
    assert "language_model.lm_head.weight  [256, 64] F32" in out
    assert "no problems found" in out
    assert "vLLM serving" not in out  # vLLM's KimiK25 class takes aux states


def test_hybrid_nemotron_h_is_noted_not_a_problem(tmp_path, capsys):
    """Nemotron-H as transformers saves it (``backbone.`` keys, Mamba-2 layers,
    ``{"__float__": "Infinity"}`` in its config, ``mlp_hidden_act``): healthy, and
    noted as a hybrid."""
    from speculators_kimi.tiny_verifier import nemotron_h

    path = nemotron_h(tmp_path / "nemotron_h").path
    code, report = doctor_report(capsys, str(path))
    assert code == 0, report["problems"]
    assert report["text_config"]["hybrid"] is True
    assert report["weights"]["prefix"] == "backbone"
    assert report["weights"]["norm"]["key"] == "backbone.norm_f.weight"
    assert report["weights"]["norm_kind"] == "rms"
    assert cli.main(["doctor", str(path)]) == 0
    out = capsys.readouterr().out
    assert "hybrid: linear-attention or Mamba layers beside attention" in out
    assert "no problems found" in out


def test_tied_gemma(tmp_path, capsys):
    code, report = doctor_report(capsys, str(gemma3_text(tmp_path / "gemma")))
    assert code == 0, report["problems"]
    assert report["weights"]["tied"] is True
    assert report["weights"]["norm_kind"] == "gemma_rms"
    assert (
        report["weights"]["head"]["key"] == "model.language_model.embed_tokens.weight"
    )
    # vLLM 0.34's own Gemma-3 class takes no aux hidden states: a note, not a
    # problem (the draft trains; vLLM's Transformers backend can serve it).
    architecture = report["text_config"]["architectures"][0]
    assert architecture.startswith("Gemma3For")
    note = report["text_config"]["vllm_aux_states"]
    assert f"vLLM 0.34.0's own {architecture} does not implement SupportsEagle3" in note
    assert cli.main(["doctor", str(tmp_path / "gemma")]) == 0
    assert f"  vLLM serving: {note}" in capsys.readouterr().out.splitlines()


def test_missing_shard_is_a_problem(tmp_path, capsys):
    path = kimi_hub(tmp_path / "kimi")
    (path / "model-00003-of-00003.safetensors").unlink()
    code, report = doctor_report(capsys, str(path))
    assert code == 1
    (problem,) = report["problems"]
    assert "model-00003-of-00003" in problem["problem"]
    assert "Re-download" in problem["fix"]


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_every_shard_of_the_index_is_checked(tmp_path, capsys, damage):
    """A layer shard (which no tensor the draft reads lives in) is checked too:
    present, and as long as its header says."""
    path = kimi_hub(tmp_path / "kimi")
    shard = path / "model-00002-of-00003.safetensors"
    if damage == "missing":
        shard.unlink()
    else:
        shard.write_bytes(shard.read_bytes()[:-16])
    before = {p.name: p.read_bytes() for p in path.iterdir() if p.is_file()}
    code, report = doctor_report(capsys, str(path), "--check-values")
    assert code == 1
    (problem,) = report["problems"]
    state = "missing" if damage == "missing" else "truncated ("
    assert f"Shard {shard} is {state}" in problem["problem"]
    assert "language_model.model.layers.0.input_layernorm.weight" in problem["problem"]
    assert "Re-download" in problem["fix"]
    bad = [r for r in report["shards"] if not r["ok"]]
    assert [r["shard"] for r in bad] == [shard.name]
    index = json.loads((path / "model.safetensors.index.json").read_text())
    assert bad[0]["tensors"] == list(index["weight_map"].values()).count(shard.name)
    assert {p.name: p.read_bytes() for p in path.iterdir() if p.is_file()} == before
    assert cli.main(["doctor", str(path)]) == 1
    assert f"shards: 2 of 3 present and whole (not: {shard.name})" in (
        capsys.readouterr().out
    )


def test_a_torn_single_file_checkpoint_is_one_problem(tmp_path, capsys):
    path = gemma3_text(tmp_path / "gemma")
    tensors = safetensors_torch.load_file(path / "model-00001-of-00001.safetensors")
    write_checkpoint(path, tensors)  # one model.safetensors, no index
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    code, report = doctor_report(capsys, str(path))
    assert code == 1
    (problem,) = report["problems"]
    assert str(weights) in problem["problem"]


def test_a_verifier_without_its_tokenizer_files_is_a_problem(tmp_path, capsys):
    """prepare-data cannot render without them; the weights load all the same."""
    path = gemma3_text(tmp_path / "gemma")
    (path / "tokenizer_config.json").write_text("{}")
    (path / "tokenizer.json").write_text("{}")
    code, report = doctor_report(capsys, str(path))
    assert code == 0, report["problems"]
    (path / "tokenizer.json").unlink()  # copied in part
    code, report = doctor_report(capsys, str(path))
    assert code == 1
    (problem,) = report["problems"]
    assert (
        f"{path} has a tokenizer_config.json but no vocabulary" in (problem["problem"])
    )


def test_a_local_path_that_does_not_exist_is_named(tmp_path, capsys):
    missing = tmp_path / "no" / "such"
    code, report = doctor_report(capsys, str(missing))
    assert code == 1
    (problem,) = report["problems"]
    assert f"{missing}: the local path does not exist" in problem["problem"]
    assert "Hub" not in problem["problem"].split(";")[0]


def test_ambiguous_head_names_override(tmp_path, capsys):
    head = {
        "language_model.lm_head.weight": torch.randn(VOCAB, HIDDEN),
        "language_model.output.weight": torch.randn(VOCAB, HIDDEN),
    }
    path = kimi_hub(tmp_path / "kimi", head=head)
    code, report = doctor_report(capsys, str(path))
    assert code == 1
    text = report["problems"][0]["problem"]
    assert "language_model.lm_head.weight" in text
    assert "language_model.output.weight" in text
    assert "--verifier-head-key" in text
    code, report = doctor_report(
        capsys, str(path), "--verifier-head-key", "language_model.lm_head.weight"
    )
    assert code == 0, report["problems"]


def test_packed_head_is_a_problem(tmp_path, capsys):
    head = {
        "language_model.lm_head.weight_packed": torch.zeros(
            VOCAB, HIDDEN // 8, dtype=torch.int32
        )
    }
    code, report = doctor_report(capsys, str(kimi_hub(tmp_path / "kimi", head=head)))
    assert code == 1
    assert "packed" in report["problems"][0]["problem"]
    assert "unquantized" in report["problems"][0]["fix"]


def test_not_a_checkpoint(tmp_path, capsys):
    code, report = doctor_report(capsys, str(tmp_path / "nothing-here"))
    assert code == 1
    assert report["problems"]


def test_pytorch_bin_weights_name_safetensors_as_the_fix(tmp_path, capsys):
    """The fix said to pass the --verifier-* key flags, which cannot help."""
    verifier = write_skeleton(
        tmp_path / "v", gemma3_config(), prefix="model", head_key=None, sharded=False
    )
    (verifier / "model.safetensors.index.json").unlink()
    (shard,) = verifier.glob("*.safetensors")
    shard.rename(verifier / "pytorch_model.bin")
    code, report = doctor_report(capsys, str(verifier))
    assert code == 1
    (problem,) = report["problems"]
    assert problem["problem"].startswith("No safetensors weights in")
    assert "training reads no pytorch_model.bin" in problem["fix"]


NORM_KEY = "language_model.model.norm.weight"
LAST_SHARD = "model-00003-of-00003.safetensors"


def _nan_head(path: Path) -> Path:
    head = torch.randn(VOCAB, HIDDEN, dtype=torch.bfloat16)
    head[VOCAB - 7, 3] = float("nan")
    head[11, 0] = float("nan")
    return kimi_hub(path, head={HEAD_KEY: head})


def _values(report: dict) -> dict[str, dict]:
    return {record["key"]: record for record in report["value_check"]}


def test_check_values_nan_in_head(tmp_path, capsys):
    path = _nan_head(tmp_path / "kimi")
    code, report = doctor_report(capsys, str(path), "--check-values")
    assert code == 1
    assert not report["ok"]
    values = _values(report)
    assert values[HEAD_KEY]["file"] == LAST_SHARD
    assert (values[HEAD_KEY]["nan"], values[HEAD_KEY]["inf"]) == (2, 0)
    assert not values[HEAD_KEY]["finite"]
    assert values["language_model.model.embed_tokens.weight"]["finite"]
    assert values[NORM_KEY]["finite"]
    (problem,) = report["problems"]
    assert HEAD_KEY in problem["problem"] and "2 NaN" in problem["problem"]
    assert problem["fix"] == (
        f"The verifier checkpoint holds non-finite values in {HEAD_KEY} "
        f"({LAST_SHARD}); re-download or re-export it."
    )


def test_check_values_flags_what_training_rejects(tmp_path):
    # The same checkpoint fails training's load of the verifier tensors.
    from speculators.utils.verifier_weights import (
        VerifierWeightsError,
        load_verifier_tensors,
        resolve_verifier_weights,
    )

    spec = resolve_verifier_weights(str(_nan_head(tmp_path / "kimi")))
    with pytest.raises(VerifierWeightsError, match=HEAD_KEY):
        load_verifier_tensors(spec)


def test_check_values_text_and_progress(tmp_path, capsys):
    path = _nan_head(tmp_path / "kimi")
    assert cli.main(["doctor", str(path), "--check-values"]) == 1
    captured = capsys.readouterr()
    assert f"output head: {HEAD_KEY}  [{LAST_SHARD}]  2 NaN, 0 inf" in captured.out
    assert "PROBLEMS (1):" in captured.out
    progress = [line for line in captured.err.splitlines() if "checking" in line]
    assert len(progress) == 3
    assert any(HEAD_KEY in line for line in progress)


def test_check_values_inf_in_norm(tmp_path, capsys):
    norm = torch.ones(HIDDEN)
    norm[5] = float("-inf")
    path = kimi_hub(tmp_path / "kimi", norm=norm)
    code, report = doctor_report(capsys, str(path), "--check-values")
    assert code == 1
    values = _values(report)
    assert (values[NORM_KEY]["nan"], values[NORM_KEY]["inf"]) == (0, 1)
    assert values[HEAD_KEY]["finite"]
    (problem,) = report["problems"]
    assert NORM_KEY in problem["problem"] and "1 inf" in problem["problem"]
    assert NORM_KEY in problem["fix"] and LAST_SHARD in problem["fix"]


def test_check_values_clean(tmp_path, capsys):
    code, report = doctor_report(
        capsys, str(kimi_hub(tmp_path / "kimi")), "--check-values"
    )
    assert code == 0, report["problems"]
    assert report["ok"]
    assert [record["role"] for record in report["value_check"]] == [
        "embedding",
        "output head",
        "final norm",
    ]
    assert all(record["finite"] for record in report["value_check"])


def test_check_values_tied_embedding_read_once(tmp_path, capsys):
    path = gemma3_text(tmp_path / "gemma")
    code, report = doctor_report(capsys, str(path), "--check-values")
    assert code == 0, report["problems"]
    roles = [record["role"] for record in report["value_check"]]
    assert roles == ["embedding (tied head)", "final norm"]


@pytest.mark.parametrize(
    "dtype",
    [
        torch.float32,
        torch.bfloat16,
        torch.float16,
        torch.float64,
        torch.float8_e5m2,
        torch.float8_e4m3fn,
    ],
    ids=str,
)
def test_count_nonfinite_in_chunks(tmp_path, dtype):
    from speculators_kimi.doctor import count_nonfinite

    tensor = torch.randn(100, 8)
    tensor[0, 0] = float("nan")
    tensor[57, 1] = float("inf")
    tensor[60, 2] = float("-inf")
    tensor[99, 7] = -float("nan")
    write_checkpoint(tmp_path, {"w": tensor.to(dtype)}, None)
    file = tmp_path / "model.safetensors"
    # FP8 E4M3 has no inf (torch saturates an inf to its largest finite value).
    expected = (2, 0) if dtype == torch.float8_e4m3fn else (2, 2)
    # 24 bytes per chunk (a row or less): the values fall in different chunks.
    assert count_nonfinite(file, "w", chunk_bytes=24) == expected
    assert count_nonfinite(file, "w") == expected


def test_without_check_values_nan_is_not_read(tmp_path, capsys):
    # Unchanged contract: without the flag no tensor data is read, so a NaN head
    # is no problem for doctor (training would reject it).
    code, report = doctor_report(capsys, str(_nan_head(tmp_path / "kimi")))
    assert code == 0, report["problems"]
    assert report["ok"]
    assert report["value_check"] is None
    assert cli.main(["doctor", str(tmp_path / "kimi")]) == 0
    captured = capsys.readouterr()
    assert "no problems found" in captured.out
    assert "tensor values" not in captured.out
    assert "checking" not in captured.err


def test_version_still_works(capsys):
    assert cli.main(["--version"]) == 0
    assert "speculators-kimi" in capsys.readouterr().out


@pytest.fixture(scope="module")
def kimi_tiny(tmp_path_factory) -> Path:
    from speculators_kimi.tiny_verifier import build_kimi_tiny

    return build_kimi_tiny(tmp_path_factory.mktemp("kimi") / "verifier")


@pytest.mark.parametrize(
    ("arch", "flags"),
    [
        ("llama", []),
        ("llama", ["--no-norm-before-fc"]),
        ("llama", ["--fc-norm", "--no-norm-before-fc", "--no-norm-output"]),
        ("deepseek_v3", []),
        ("deepseek_v3", ["--norm-before-fc"]),
    ],
    ids=["llama", "llama-no-input-norm", "llama-fc-norm", "mla", "mla-input-norm"],
)
def test_parameter_counts_are_the_trained_models(kimi_tiny, capsys, arch, flags):
    """doctor's figures equal those of the draft `speculators train` builds from
    the same flags (its own builder, the verifier's weights loaded)."""
    import argparse

    from speculators.models.eagle3 import Eagle3DraftModel
    from speculators.train.cli import build_draft_model
    from speculators.train.config import TrainConfig

    draft_vocab = 64
    code, report = doctor_report(
        capsys,
        str(kimi_tiny),
        "--draft-arch",
        arch,
        "--draft-vocab-size",
        str(draft_vocab),
        *flags,
    )
    if arch == "deepseek_v3" and "--norm-before-fc" in flags:
        # vLLM's MLA EAGLE-3 class has no input norm before fc: counted, not served
        (problem,) = report["problems"]
        assert "could not serve" in problem["problem"]
        assert "--norm-before-fc" in problem["problem"]
        assert report["serving"] is None
    else:
        assert code == 0, report["problems"]
        assert report["serving"]["method"] == "eagle3"
    argv = ["--verifier-name-or-path", str(kimi_tiny), "--data-path", "unused"]
    args = argparse.Namespace(
        **TrainConfig.resolve([*argv, "--draft-arch", arch, *flags]).flatten()
    )
    vocab = report["text_config"]["vocab_size"]
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[:draft_vocab] = True
    d2t = torch.zeros(draft_vocab, dtype=torch.long)
    model = build_draft_model(args, Eagle3DraftModel, t2d, d2t, draft_vocab)
    memory = report["estimated_memory"]
    counts = parameter_counts(model)
    assert {name: memory[name] for name in counts} == counts
    assert report["draft_config"]["norm_before_fc"] == model.config.norm_before_fc


def test_draft_config_is_the_one_train_builds(tmp_path, capsys):
    """Gemma-3 (gelu_pytorch_tanh) and Falcon (no hidden_act in its config): the
    draft doctor shows is the one `speculators train` builds from its defaults
    (--draft-hidden-act silu, the full vocabulary without --draft-vocab-size)."""
    import argparse

    from speculators.models.eagle3 import Eagle3DraftModel
    from speculators.train.cli import build_draft_model
    from speculators.train.config import TrainConfig

    from speculators_kimi.doctor.draft import DRAFT_FIELDS
    from speculators_kimi.tiny_verifier.dense import falcon

    for verifier in (gemma3_text(tmp_path / "gemma"), falcon(tmp_path / "falcon").path):
        code, report = doctor_report(capsys, str(verifier))
        assert code == 0, report["problems"]
        argv = ["--verifier-name-or-path", str(verifier), "--data-path", "unused"]
        args = argparse.Namespace(**TrainConfig.resolve(argv).flatten())
        vocab = report["text_config"]["vocab_size"]
        model = build_draft_model(args, Eagle3DraftModel, None, None, vocab)
        built = model.config.transformer_layer_config
        shown = report["draft_config"]
        assert {k: shown[k] for k in DRAFT_FIELDS} == {
            k: getattr(built, k, None) for k in DRAFT_FIELDS
        }
        assert shown["hidden_act"] == "silu"
        assert shown["draft_vocab_size"] == vocab


def test_a_decoder_transformers_cannot_build_is_a_problem(tmp_path, capsys):
    """A config naming its own code (read as data) or no model type: training
    needs no decoder class, generate-hidden-states and evaluate do."""
    from speculators_kimi.tiny_verifier.dense import falcon

    verifier = falcon(tmp_path / "custom").path
    config = json.loads((verifier / "config.json").read_text())
    config["model_type"] = "my_custom_lm"
    config["auto_map"] = {"AutoConfig": "configuration_my.MyConfig"}
    (verifier / "config.json").write_text(json.dumps(config))
    code, report = doctor_report(capsys, str(verifier))
    assert code == 1
    (problem,) = report["problems"]
    assert "cannot load its text decoder" in problem["problem"]
    assert "'my_custom_lm'" in problem["problem"]
    assert problem["fix"] == "Its config names its own code: pass --trust-remote-code."


def _mamba(path: Path) -> None:
    from transformers import MambaConfig, MambaForCausalLM

    config = MambaConfig(
        vocab_size=VOCAB, hidden_size=32, state_size=4, num_hidden_layers=LAYERS
    )
    MambaForCausalLM(config).save_pretrained(path)


def _bloom(path: Path) -> None:
    from transformers import BloomConfig, BloomForCausalLM

    config = BloomConfig(vocab_size=VOCAB, hidden_size=32, n_head=4, n_layer=LAYERS)
    BloomForCausalLM(config).save_pretrained(path)


@pytest.mark.parametrize(
    ("build", "said"),
    [
        (_mamba, "('mamba') has no attention heads"),
        (_bloom, "BloomConfig names no context length"),
    ],
    ids=["mamba", "bloom"],
)
def test_a_config_the_draft_cannot_copy_names_the_draft_config_flag(
    tmp_path, capsys, build, said
):
    """Mamba has no attention heads for the default draft to copy, Bloom (ALiBi)
    no context length: one problem naming ``--draft-config`` (Mamba's was
    "AttributeError ... See the message."). Training refuses them the same way:
    Mamba before any work, in its own words (unit 0025), Bloom as its draft is
    built (unit 0043)."""
    build(tmp_path / "verifier")
    code, report = doctor_report(capsys, str(tmp_path / "verifier"))
    assert code == 1
    (problem,) = report["problems"]
    assert said in problem["problem"]
    assert not problem["problem"].endswith("..")
    assert "--draft-config" in problem["problem"] + problem["fix"]


def test_a_verifier_with_altup_streams_cannot_be_fixed_by_a_flag(tmp_path, capsys):
    """Gemma-3n's layers carry four AltUp streams (unit 0045): no flag helps."""
    from transformers import Gemma3nTextConfig

    Gemma3nTextConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=4,
        layer_types=["sliding_attention"] * 3 + ["full_attention"],
        num_kv_shared_layers=0,
    ).save_pretrained(tmp_path / "gemma3n")
    code, report = doctor_report(capsys, str(tmp_path / "gemma3n"))
    assert code == 1
    (problem,) = [p for p in report["problems"] if "AltUp" in p["problem"]]
    assert "altup_num_inputs=4 AltUp streams" in problem["problem"]
    assert problem["fix"].startswith("No flag fixes this")
