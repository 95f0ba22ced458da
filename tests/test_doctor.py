"""`speculators-kimi doctor`: reports a verifier without loading tensors.

Run with the patched package on the path:
``PYTHONPATH=/tmp/unit-weights/src:/work/main pytest tests/test_doctor.py``
(or with speculators-kimi installed).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")
pytest.importorskip("speculators.utils.verifier_weights")

from zoo_builders import write_checkpoint  # noqa: E402

from speculators_kimi import cli  # noqa: E402

HIDDEN, VOCAB, LAYERS = 64, 256, 8


def _mla_text() -> dict:
    return {
        "model_type": "kimi_k2",
        "hidden_size": HIDDEN,
        "vocab_size": VOCAB,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "n_group": 1,
        "topk_group": 1,
        "first_k_dense_replace": 1,
        "kv_lora_rank": 16,
        "q_lora_rank": 24,
        "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 16,
        "v_head_dim": 32,
        "max_position_embeddings": 512,
        "tie_word_embeddings": False,
    }


def _write(path: Path, config: dict, shards: list[dict[str, torch.Tensor]]) -> Path:
    """``config.json`` and the shards (always with an index), via the zoo's writer."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    tensors = {key: value for shard in shards for key, value in shard.items()}
    write_checkpoint(path, tensors, [list(shard) for shard in shards])
    return path


def kimi_hub(path: Path, head: dict | None = None) -> Path:
    """Kimi-K2.5 as the Hub ships it: remote-code config, language_model.* keys."""
    marker = path.parent / "imported"
    path.mkdir(parents=True, exist_ok=True)
    (path / "configuration_kimi.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('x')\n"
    )
    config = {
        "model_type": "kimi_k25",
        "architectures": ["KimiK25ForConditionalGeneration"],
        "auto_map": {"AutoConfig": "configuration_kimi.KimiK25Config"},
        "tie_word_embeddings": True,
        "text_config": {
            **_mla_text(),
            "quantization_config": {
                "quant_method": "compressed-tensors",
                "format": "pack-quantized",
            },
        },
        "vision_config": {"hidden_size": 32, "num_hidden_layers": 2},
    }
    layers = {
        f"language_model.model.layers.{i}.input_layernorm.weight": torch.ones(HIDDEN)
        for i in range(LAYERS)
    }
    vision = {
        f"vision_tower.encoder.blocks.{i}.norm.weight": torch.ones(32) for i in range(2)
    }
    first = {"language_model.model.embed_tokens.weight": torch.randn(VOCAB, HIDDEN)}
    last = {"language_model.model.norm.weight": torch.ones(HIDDEN)}
    last.update(
        head
        if head is not None
        else {"language_model.lm_head.weight": torch.randn(VOCAB, HIDDEN)}
    )
    return _write(path, config, [first, {**layers, **vision}, last])


def gemma3_text(path: Path) -> Path:
    config = {
        "model_type": "gemma3",
        "text_config": {
            "model_type": "gemma3_text",
            "hidden_size": HIDDEN,
            "vocab_size": VOCAB,
            "num_hidden_layers": LAYERS,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "intermediate_size": 128,
            "tie_word_embeddings": True,
        },
        "vision_config": {"hidden_size": 32, "num_hidden_layers": 1},
    }
    tensors = {
        "model.language_model.embed_tokens.weight": torch.randn(VOCAB, HIDDEN),
        "model.language_model.norm.weight": torch.zeros(HIDDEN),
        "model.vision_tower.vision_model.post_layernorm.weight": torch.ones(32),
    }
    tensors.update(
        {
            f"model.language_model.layers.{i}.input_layernorm.weight": torch.ones(
                HIDDEN
            )
            for i in range(LAYERS)
        }
    )
    return _write(path, config, [tensors])


def _doctor(capsys, *argv: str) -> tuple[int, dict]:
    code = cli.main(["doctor", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_healthy_kimi_hub_report(tmp_path, capsys):
    path = kimi_hub(tmp_path / "kimi")
    code, report = _doctor(capsys, str(path))
    assert code == 0, report["problems"]
    assert report["ok"]
    assert report["text_config"]["found_at"] == "text_config"
    assert report["text_config"]["hidden_size"] == HIDDEN
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


def test_text_output(tmp_path, capsys):
    path = kimi_hub(tmp_path / "kimi")
    assert cli.main(["doctor", str(path)]) == 0
    out = capsys.readouterr().out
    assert "decoder prefix: 'language_model.model'" in out
    assert "language_model.lm_head.weight  [256, 64] F32" in out
    assert "no problems found" in out


def test_tied_gemma(tmp_path, capsys):
    code, report = _doctor(capsys, str(gemma3_text(tmp_path / "gemma")))
    assert code == 0, report["problems"]
    assert report["weights"]["tied"] is True
    assert report["weights"]["norm_kind"] == "gemma_rms"
    assert (
        report["weights"]["head"]["key"] == "model.language_model.embed_tokens.weight"
    )


def test_missing_shard_is_a_problem(tmp_path, capsys):
    path = kimi_hub(tmp_path / "kimi")
    (path / "model-00003-of-00003.safetensors").unlink()
    code, report = _doctor(capsys, str(path))
    assert code == 1
    (problem,) = report["problems"]
    assert "model-00003-of-00003" in problem["problem"]
    assert "Re-download" in problem["fix"]


def test_ambiguous_head_names_override(tmp_path, capsys):
    head = {
        "language_model.lm_head.weight": torch.randn(VOCAB, HIDDEN),
        "language_model.output.weight": torch.randn(VOCAB, HIDDEN),
    }
    path = kimi_hub(tmp_path / "kimi", head=head)
    code, report = _doctor(capsys, str(path))
    assert code == 1
    text = report["problems"][0]["problem"]
    assert "language_model.lm_head.weight" in text
    assert "language_model.output.weight" in text
    assert "--verifier-head-key" in text
    code, report = _doctor(
        capsys, str(path), "--verifier-head-key", "language_model.lm_head.weight"
    )
    assert code == 0, report["problems"]


def test_packed_head_is_a_problem(tmp_path, capsys):
    head = {
        "language_model.lm_head.weight_packed": torch.zeros(
            VOCAB, HIDDEN // 8, dtype=torch.int32
        )
    }
    code, report = _doctor(capsys, str(kimi_hub(tmp_path / "kimi", head=head)))
    assert code == 1
    assert "packed" in report["problems"][0]["problem"]
    assert "unquantized" in report["problems"][0]["fix"]


def test_not_a_checkpoint(tmp_path, capsys):
    code, report = _doctor(capsys, str(tmp_path / "nothing-here"))
    assert code == 1
    assert report["problems"]


def test_version_still_works(capsys):
    assert cli.main(["--version"]) == 0
    assert "speculators-kimi" in capsys.readouterr().out
