"""`speculators launch-vllm` (unit 0022) emits what vLLM 0.34 serves.

The dry-run commands for a Kimi-K2.5-shaped verifier (nested DeepSeek-V3
``text_config``, 61 layers) and a Qwen2.5-Omni-shaped one
(``thinker_config.text_config``, 28 layers) are handed, in one subprocess in the
scratch vLLM environment of ``speculators-kimi vllm-check`` (``vllm_check.env``,
vLLM 0.34.0), to vLLM's own code (``tests/support/vllm_launch_probe.py``):
``vllm serve``'s argument parser and validation, ``KVTransferConfig``, vLLM's
text config of the same checkpoint, ``ExtractHiddenStatesConfig`` and
``EngineArgs.create_speculative_config``.
``VLLM_TARGET_DEVICE=cpu`` is vLLM's own switch to its CPU platform (the
default device inference finds no GPU here).
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

from helpers import SUPPORT, run
from speculators.data_generation.vllm_launch import main as launch_vllm
from speculators.models.utils import resolve_target_layer_ids
from speculators.utils.target_layers import default_target_layer_ids
from transformers import Kimi_K25Config, Qwen2_5OmniConfig

from speculators_kimi.tiny_verifier.configs import mla_text
from speculators_kimi.vllm_check.env import default_env, ensure_env

DENSE = {
    "hidden_size": 64,
    "vocab_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 512,
}


def _kimi_k25(path: Path) -> Path:
    """Kimi-K2.5's layout as the Hub names it, at 61 text layers."""
    Kimi_K25Config(
        text_config={"model_type": "kimi_k2", **mla_text(num_hidden_layers=61)},
        vision_config={
            "patch_size": 14,
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "intermediate_size": 64,
        },
        architectures=["KimiK25ForConditionalGeneration"],
    ).save_pretrained(path)
    return path


def _qwen_omni(path: Path) -> Path:
    Qwen2_5OmniConfig(
        thinker_config={"text_config": {**DENSE, "num_hidden_layers": 28}},
        architectures=["Qwen2_5OmniForConditionalGeneration"],
    ).save_pretrained(path)
    return path


def _trainer_ids(model: Path) -> list[int]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "--target-layer-ids is not explicitly set"
        return resolve_target_layer_ids(None, str(model))


def test_vllm_accepts_launch_vllm_commands(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MOONCAKE_LOCAL_HOSTNAME", "10.0.0.7")
    kimi = _kimi_k25(tmp_path / "kimi-k2.5")
    omni = _qwen_omni(tmp_path / "qwen2.5-omni")
    vllm_args = ["--max-model-len", "512", "--port", "8123"]
    plans = {
        "kimi": launch_vllm(
            [
                str(kimi),
                "--hidden-states-path",
                str(tmp_path / "hs"),
                "--dry-run",
                "--",
                *vllm_args,
            ]
        ),
        "omni": launch_vllm([str(omni), "--dry-run", "--", *vllm_args]),
        "kimi_mooncake": launch_vllm(
            [
                str(kimi),
                "--hidden-states-backend",
                "mooncake",
                "--dry-run",
                "--",
                *vllm_args,
            ]
        ),
    }
    printed = capsys.readouterr().out.splitlines()
    assert printed == [plan.shell_command for plan in plans.values()]
    commands = tmp_path / "commands.json"
    commands.write_text(json.dumps({n: p.command for n, p in plans.items()}))

    python = ensure_env(default_env())
    proc = run(
        [str(python), str(SUPPORT / "vllm_launch_probe.py"), str(commands)],
        env={
            "VLLM_TARGET_DEVICE": "cpu",
            "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        },
        timeout=300,
    )
    report = json.loads(proc.stdout.strip().splitlines()[-1])

    for name, model, text_type in (
        ("kimi", kimi, "deepseek_v3"),
        ("omni", omni, "qwen2_5_omni_text"),
        ("kimi_mooncake", kimi, "deepseek_v3"),
    ):
        got = report[name]
        assert got["model_tag"] == str(model)
        assert got["remaining_args"] == {"max_model_len": 512, "port": 8123}
        # vLLM's own reading of the nested checkpoint: the text model's layers.
        n = got["text_num_hidden_layers"]
        assert got["text_model_type"] == text_type
        expected = [*default_target_layer_ids(n), n]
        assert plans[name].layer_ids == expected
        assert expected[:-1] == _trainer_ids(model)
        # extract_hidden_states wraps the verifier's config with those ids.
        assert got["extract_config_layer_ids"] == expected
        assert got["extract_config_architectures"] == ["ExtractHiddenStatesModel"]
        assert got["extract_text_num_hidden_layers"] == n
        assert got["spec_method"] == "extract_hidden_states"
        assert got["spec_num_speculative_tokens"] == 1
        assert got["spec_draft_config_class"] == "ExtractHiddenStatesConfig"
        assert got["spec_layer_ids"] == expected
        assert got["target_num_hidden_layers"] == n
        assert got["kv_transfer_config_type"] == "KVTransferConfig"
        assert got["kv_is_producer"] is True

    assert report["kimi"]["text_num_hidden_layers"] == 61
    assert report["omni"]["text_num_hidden_layers"] == 28
    assert report["kimi"]["kv_connector"] == "ExampleHiddenStatesConnector"
    assert report["kimi"]["kv_connector_extra_config"] == {
        "shared_storage_path": str(tmp_path / "hs")
    }
    mooncake = report["kimi_mooncake"]
    assert mooncake["kv_connector"] == "MooncakeHiddenStatesConnector"
    assert mooncake["kv_connector_module_path"] == (
        "hs_connectors.mooncake_hidden_states_connector"
    )
    assert mooncake["kv_connector_extra_config"]["mooncake"]["local_hostname"] == (
        "10.0.0.7"
    )
