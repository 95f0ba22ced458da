"""``speculators launch-vllm``: the ``vllm serve`` command for hidden-state datagen.

Tiny ``config.json`` verifiers in the layouts found on the Hub; the layer ids are
compared with the trainer's own resolution of the same checkpoint.
"""

import json
import shlex
import warnings
from pathlib import Path

import pytest
from transformers import Kimi_K25Config
from typer.testing import CliRunner

from speculators.cli import app
from speculators.data_generation import vllm_launch
from speculators.data_generation.vllm_launch import VllmLaunchError
from speculators.models.utils import resolve_target_layer_ids
from speculators.utils.cli_errors import ModelSourceError, known_error_message
from tests.unit.mock import verifiers

VISION_LAYERS = 6


def _kimi_k25(path: Path) -> Path:
    """Kimi-K2.5's shape: a DeepSeek-V3 (``kimi_k2``) text config of 61 layers."""
    text = verifiers.mla_text(num_hidden_layers=61)
    Kimi_K25Config(
        text_config={"model_type": "kimi_k2", **text},
        vision_config=dict(verifiers.KIMI_VISION, num_hidden_layers=VISION_LAYERS),
    ).save_pretrained(path)
    return path


def _qwen_omni(path: Path) -> Path:
    """Qwen2.5-Omni's shape: ``thinker_config.text_config``, 28 layers."""
    from transformers import Qwen2_5OmniConfig  # noqa: PLC0415

    Qwen2_5OmniConfig(
        thinker_config={"text_config": verifiers.dense_text(num_hidden_layers=28)},
    ).save_pretrained(path)
    return path


def _internvl(path: Path) -> Path:
    """InternVL-chat's shape: a remote-code wrapper with ``llm_config``."""
    return verifiers.write_remote_checkpoint(
        path,
        model_type="internvl_chat",
        sub_name="llm_config",
        text={"model_type": "qwen2", **verifiers.dense_text(num_hidden_layers=24)},
        extra={"vision_config": {"num_hidden_layers": VISION_LAYERS}},
    )[0]


def _deepseek_vl2(path: Path) -> Path:
    """DeepSeek-VL2's shape: a remote-code wrapper with ``language_config``."""
    return verifiers.write_remote_checkpoint(
        path,
        model_type="deepseek_vl_v2",
        sub_name="language_config",
        text={
            "model_type": "deepseek_v2",
            **verifiers.mla_text(num_hidden_layers=30),
        },
        extra={"vision_config": {"num_hidden_layers": VISION_LAYERS}},
    )[0]


def _llama(path: Path) -> Path:
    return verifiers.llama(path)


#: builder, the text config's layer count the builder wrote.
LAYOUTS = {
    "llama": (_llama, verifiers.LAYERS),
    "kimi_k25": (_kimi_k25, 61),
    "qwen2_5_omni": (_qwen_omni, 28),
    "internvl": (_internvl, 24),
    "deepseek_vl2": (_deepseek_vl2, 30),
}


def _invoke(*argv: str):
    return CliRunner().invoke(app, ["launch-vllm", *argv])


def _dry_run(*argv: str) -> list[str]:
    """The command ``--dry-run`` prints, split as a shell splits it."""
    result = _invoke(*argv)
    assert result.exit_code == 0, (result.output, result.exception)
    return shlex.split(result.stdout.strip().splitlines()[-1])


def _flag(command: list[str], name: str) -> dict:
    return json.loads(command[command.index(name) + 1])


def _layer_ids(command: list[str]) -> list[int]:
    spec = _flag(command, "--speculative-config")
    return spec["draft_model_config"]["hf_config"]["eagle_aux_hidden_state_layer_ids"]


def _trainer_defaults(model: Path) -> list[int]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the "not explicitly set" notice
        return resolve_target_layer_ids(None, str(model))


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_dry_run_uses_the_trainers_layers_of_the_text_config(tmp_path, layout):
    build, num_layers = LAYOUTS[layout]
    model = build(tmp_path / layout)

    command = _dry_run(str(model), "--dry-run")

    assert command[:3] == ["vllm", "serve", str(model)]
    spec = _flag(command, "--speculative-config")
    assert spec["method"] == "extract_hidden_states"
    assert spec["num_speculative_tokens"] == 1
    # The draft's aux layers as training resolves them, then the final state.
    assert _layer_ids(command) == [*_trainer_defaults(model), num_layers]
    assert VISION_LAYERS not in _layer_ids(command)


def test_explicit_layers_and_last_layer_switch(tmp_path):
    model = _kimi_k25(tmp_path / "kimi")
    result = _invoke(str(model), "--dry-run", "--target-layer-ids", "3", "40", "59")
    assert result.exit_code == 0, result.output
    assert _layer_ids(shlex.split(result.stdout.splitlines()[-1])) == [3, 40, 59, 61]
    assert "train with --target-layer-ids 3 40 59" in result.stderr

    command = _dry_run(str(model), "--dry-run", "--target-layer-ids", "3", "61")
    assert _layer_ids(command) == [3, 61]  # the final layer is not repeated
    command = _dry_run(str(model), "--no-include-last-layer", "--dry-run")
    assert _layer_ids(command) == _trainer_defaults(model)


def test_vllm_args_after_separator_pass_through(tmp_path):
    model = _llama(tmp_path / "llama")
    vllm_args = ["--tensor-parallel-size", "8", "--max-model-len", "4096", "--port=9"]

    command = _dry_run(str(model), "--dry-run", "--", *vllm_args)

    assert command[-len(vllm_args) :] == vllm_args
    assert command.count("--speculative-config") == 1


def test_file_backend_writes_to_the_hidden_states_path(tmp_path):
    model = _llama(tmp_path / "llama")
    command = _dry_run(
        str(model), "--hidden-states-path", str(tmp_path / "hs"), "--dry-run"
    )
    assert _flag(command, "--kv-transfer-config") == {
        "kv_connector": "ExampleHiddenStatesConnector",
        "kv_role": "kv_producer",
        "kv_connector_extra_config": {"shared_storage_path": str(tmp_path / "hs")},
    }


def test_mooncake_backend_and_its_flags(tmp_path, monkeypatch):
    monkeypatch.setenv("MOONCAKE_LOCAL_HOSTNAME", "10.0.0.7")
    model = _llama(tmp_path / "llama")
    command = _dry_run(
        str(model),
        "--hidden-states-backend",
        "mooncake",
        "--mooncake-master",
        "10.0.0.1:50051",
        "--dry-run",
    )
    kv = _flag(command, "--kv-transfer-config")
    assert kv["kv_connector"] == "MooncakeHiddenStatesConnector"
    assert kv["kv_role"] == "kv_producer"
    store = kv["kv_connector_extra_config"]["mooncake"]
    assert store["master_server_address"] == "10.0.0.1:50051"
    assert store["local_hostname"] == "10.0.0.7"


def test_trust_remote_code_runs_config_code_and_reaches_vllm(tmp_path):
    model = _internvl(tmp_path / "internvl")
    marker = model.parent / f"{model.name}.imported"

    command = _dry_run(str(model), "--dry-run")
    assert not marker.exists()
    assert "--trust-remote-code" not in command

    command = _dry_run(str(model), "--trust-remote-code", "--dry-run")
    assert marker.exists()
    assert command.count("--trust-remote-code") == 1
    assert _layer_ids(command) == [*_trainer_defaults(model), 24]
    command = _dry_run(
        str(model), "--trust-remote-code", "--dry-run", "--", "--trust-remote-code"
    )
    assert command.count("--trust-remote-code") == 1


def test_missing_model_is_one_known_error(tmp_path):
    result = _invoke(str(tmp_path / "absent"), "--dry-run")
    assert isinstance(result.exception, ModelSourceError)
    message = known_error_message(result.exception)
    assert message is not None
    assert str(tmp_path / "absent") in message
    assert "\n" not in message


@pytest.mark.parametrize("ids", [["2", "9"], ["-1", "3"], ["4", "4"]])
def test_layer_out_of_range_is_one_known_error(tmp_path, ids):
    model = _llama(tmp_path / "llama")
    result = _invoke(str(model), "--dry-run", "--target-layer-ids", *ids)
    assert isinstance(result.exception, VllmLaunchError)
    message = known_error_message(result.exception)
    assert message is not None
    assert "\n" not in message
    assert "--target-layer-ids" in message
    assert str(model) in message
    assert f"within [0, {verifiers.LAYERS}]" in message


def test_too_shallow_verifier_asks_for_explicit_layers(tmp_path):
    model = verifiers.write_config(
        tmp_path / "shallow",
        {"model_type": "llama", **verifiers.dense_text(num_hidden_layers=2)},
    )
    result = _invoke(str(model), "--dry-run")
    assert isinstance(result.exception, VllmLaunchError)
    assert "pass --target-layer-ids explicitly" in str(result.exception)


def test_vllm_flags_before_separator_or_overriding_are_refused(tmp_path):
    model = _llama(tmp_path / "llama")
    result = _invoke(str(model), "--dry-run", "--port", "8000")
    assert result.exit_code == 2
    assert "after '--'" in result.output

    result = _invoke(str(model), "--dry-run", "--", "--kv_transfer_config={}")
    assert isinstance(result.exception, VllmLaunchError)
    assert "--kv_transfer_config" in str(result.exception)


def test_runs_vllm_from_path_or_says_it_is_missing(tmp_path, monkeypatch):
    model = _llama(tmp_path / "llama")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    result = _invoke(str(model))
    assert isinstance(result.exception, VllmLaunchError)
    assert "no 'vllm' executable on PATH" in str(result.exception)

    vllm = bin_dir / "vllm"
    vllm.write_text("#!/bin/sh\n")
    vllm.chmod(0o755)
    calls = []
    monkeypatch.setattr(vllm_launch.os, "execv", lambda *call: calls.append(call))
    result = _invoke(str(model), "--", "--port", "8000")
    assert result.exit_code == 0, result.output
    [(executable, argv)] = calls
    assert executable == str(vllm)
    assert argv[:3] == ["vllm", "serve", str(model)]
    assert argv[-2:] == ["--port", "8000"]
    assert _layer_ids(argv) == [*_trainer_defaults(model), verifiers.LAYERS]
