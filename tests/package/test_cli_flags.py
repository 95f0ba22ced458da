"""Counts and sizes a run cannot use are refused by the commands' own parsers, in
one usage line, before any model loads (``--batch-size 0`` was accepted, and a
run with it did nothing useful)."""

from __future__ import annotations

import pytest

from speculators_kimi.cli import build_parser

#: (command, the arguments it needs, the flag given a count it cannot use).
FLAGS = [
    ("generate-hidden-states", ["--verifier", "v", "--data-path", "d"], "--batch-size"),
    (
        "generate-hidden-states",
        ["--verifier", "v", "--data-path", "d"],
        "--max-batch-tokens",
    ),
    ("doctor", ["v"], "--num-layers"),
    ("doctor", ["v"], "--draft-vocab-size"),
    ("vllm-check", ["e", "--checkpoint", "c", "--verifier", "v"], "--tokens"),
    (
        "vllm-check",
        ["e", "--checkpoint", "c", "--verifier", "v"],
        "--num-speculative-tokens",
    ),
    ("demo", [], "--epochs"),
    ("demo", [], "--max-steps"),
    ("demo", [], "--num-samples"),
]


@pytest.mark.parametrize(("command", "needed", "flag"), FLAGS)
@pytest.mark.parametrize("value", ["0", "-3"])
def test_a_count_below_one_is_a_usage_error(command, needed, flag, value, capsys):
    parser = build_parser(command)
    args = parser.parse_args([command, *needed, flag, "2"])
    assert getattr(args, flag.lstrip("-").replace("-", "_")) == 2
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args([command, *needed, flag, value])
    assert exit_info.value.code == 2
    assert f"{value} is not a positive integer" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["evaluate", "generate-hidden-states"])
def test_a_device_this_machine_lacks_is_a_usage_error(command, capsys):
    """``--device cuda`` on a machine without one ended in torch's
    ``AssertionError: Torch not compiled with CUDA enabled``, after loading."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    needed = {
        "evaluate": ["--draft", "d", "--verifier", "v", "--prompts", "p"],
        "generate-hidden-states": ["--verifier", "v", "--data-path", "d"],
    }[command]
    parser = build_parser(command)
    assert parser.parse_args([command, *needed, "--device", "cpu"]).device == "cpu"
    for device in (f"cuda:{count}", "nonsense"):
        with pytest.raises(SystemExit) as exit_info:
            parser.parse_args([command, *needed, "--device", device])
        assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"cuda:{count}: this machine has {count} CUDA device(s)" in err
    assert "nonsense is not a device" in err
