"""Upstream's vLLM clients against a stand-in that speaks vLLM 0.34's protocol.

The stand-in (``vllm_hidden_states_server``) computes its states with a real tiny
Kimi-K2.5-shaped verifier and writes them as vLLM's ``ExampleHiddenStatesConnector``
does; the test runs upstream's ``speculators generate-offline-data`` on it and
compares the files with ``speculators-kimi generate-hidden-states``'; then it
runs upstream's online training (``speculators train --vllm-endpoint``) on it.
"""

from __future__ import annotations

import json
import math
import re
import socket
from pathlib import Path

import pytest
import torch
from helpers import BIN, console_in_process, rows_dataset, run
from safetensors import safe_open
from safetensors.torch import load_file
from speculators.cli import app
from typer.testing import CliRunner
from vllm_hidden_states_server import VllmHiddenStatesServer

from speculators_kimi.datagen import generate_hidden_states
from speculators_kimi.tiny_verifier import build_kimi_tiny

#: Eight rows of distinct lengths (3..17 tokens) of the tiny vocabulary.
ROWS = [
    [2, *[(7 * i + 3 * j) % 200 + 4 for j in range(2 * i + 1)], 3] for i in range(8)
]


@pytest.fixture(scope="module")
def kimi(tmp_path_factory) -> Path:
    return build_kimi_tiny(tmp_path_factory.mktemp("kimi") / "verifier")


def test_offline_files_from_vllm_protocol_equal_ours(kimi, tmp_path):
    """``generate-offline-data`` on the stand-in writes what our datagen writes.

    Equal, exactly (``torch.equal``), file by file: ``token_ids`` (int64, the
    row) and ``hidden_states`` (``[seq, 4, hidden]`` bf16: aux layers 2, 4, 5 and the
    final state, id 8, before the final norm). Both run the same bf16 decoder on
    CPU one row at a time (``batch_size=1``, so no padding). Not compared: the
    metadata (vLLM's ``save_file`` writes none; ours carries the provenance).
    """
    data = rows_dataset(tmp_path / "data", ROWS)
    storage, offline = tmp_path / "vllm-storage", tmp_path / "offline"
    with VllmHiddenStatesServer(kimi, storage) as server:
        assert server.layer_ids == [2, 4, 5, 8]
        hidden = int(server.verifier.text_config.hidden_size)
        result = CliRunner().invoke(
            app,
            [
                "generate-offline-data",
                "--endpoint",
                server.endpoint,
                "--preprocessed-data",
                str(data),
                "--output",
                str(offline),
                "--concurrency",
                "2",
                "--validate-outputs",
                "--fail-on-error",
            ],
        )
    assert result.exit_code == 0, result.output
    # The client sent each row once as a token-id prompt and moved every file
    # vLLM wrote (its lock file taken and removed) into --output.
    assert sorted(r["body"]["prompt"] for r in server.requests) == sorted(ROWS)
    assert all(r["body"]["max_tokens"] == 1 for r in server.requests)
    assert all(
        Path(r["kv_transfer_params"]["hidden_states_path"]).parent == storage
        for r in server.requests
    )
    assert list(storage.iterdir()) == []
    assert sorted(p.name for p in offline.iterdir()) == sorted(
        f"hs_{i}.safetensors" for i in range(len(ROWS))
    )

    ours = generate_hidden_states(
        kimi,
        data,
        output_dir=tmp_path / "ours",
        dtype="bfloat16",
        device="cpu",
        batch_size=1,
        progress=False,
    )
    assert ours.target_layer_ids == [2, 4, 5]  # + the final state, appended
    for i, row in enumerate(ROWS):
        theirs = load_file(offline / f"hs_{i}.safetensors")
        mine = load_file(tmp_path / "ours" / f"hs_{i}.safetensors")
        assert set(theirs) == set(mine) == {"hidden_states", "token_ids"}
        assert theirs["token_ids"].tolist() == row
        assert torch.equal(theirs["token_ids"], mine["token_ids"])
        assert theirs["hidden_states"].dtype == mine["hidden_states"].dtype
        assert theirs["hidden_states"].dtype == torch.bfloat16
        assert theirs["hidden_states"].shape == (len(row), 4, hidden)
        assert torch.equal(theirs["hidden_states"], mine["hidden_states"]), i
        with safe_open(str(offline / f"hs_{i}.safetensors"), framework="pt") as f:
            assert not f.metadata()


def _online_train_argv(
    kimi: Path, data: Path, endpoint: str, tmp_path: Path, save: Path
) -> list[str]:
    """``speculators train`` of a tiny EAGLE-3 draft from ``endpoint``'s states."""
    return [
        "train",
        "--verifier-name-or-path", str(kimi),
        "--data-path", str(data),
        "--speculator-type", "eagle3",
        "--total-seq-len", "32",
        "--epochs", "1",
        "--num-workers", "0",
        "--vllm-endpoint", endpoint,
        "--hidden-states-path", str(tmp_path / "no-cache"),
        "--save-path", str(save / "checkpoints"),
        "--log-dir", str(save / "logs"),
    ]  # fmt: skip


_LOSS = re.compile(r"train/loss=([-+0-9.e]+|nan|inf)")


def test_online_training_reads_states_from_vllm_protocol(kimi, tmp_path):
    """``speculators train --vllm-endpoint`` (no hidden_states on disk) trains on
    the stand-in's states: every step's batch came from a completions request,
    the losses are finite and non-zero, and the round-trip files are gone."""
    data = rows_dataset(tmp_path / "data", ROWS)
    storage, save = tmp_path / "vllm-storage", tmp_path / "run"
    steps = 2
    with VllmHiddenStatesServer(kimi, storage) as server:
        argv = _online_train_argv(kimi, data, server.endpoint, tmp_path, save)
        argv += ["--max-steps", str(steps), "--on-missing", "generate"]
        argv += ["--no-resume-from-checkpoint"]
        proc = run([str(BIN / "speculators"), *argv], cwd=tmp_path, timeout=600)
    out = proc.stdout + proc.stderr
    losses = [float(x) for x in _LOSS.findall(out)]
    assert len(losses) >= steps, out[-3000:]
    assert all(math.isfinite(x) and x > 0 for x in losses), losses
    state = json.loads((save / "checkpoints" / "0" / "training_state.json").read_text())
    assert state["global_step"] == steps
    prompts = [r["body"]["prompt"] for r in server.requests]
    assert prompts and all(p in ROWS for p in prompts)
    assert list(storage.iterdir()) == []  # read, lock taken, file deleted
    assert not (tmp_path / "no-cache").exists() or not any(
        (tmp_path / "no-cache").iterdir()
    )

    # Offline, from `speculators-kimi generate-hidden-states`' files of the same
    # rows: the same losses, the same trained draft.
    offline = tmp_path / "offline"
    generate_hidden_states(
        kimi, data, output_dir=offline / "hs", device="cpu", batch_size=1,
        progress=False,
    )  # fmt: skip
    argv_off = [a for a in argv if a != server.endpoint and a != "--vllm-endpoint"]
    argv_off[argv_off.index(str(tmp_path / "no-cache"))] = str(offline / "hs")
    argv_off[argv_off.index(str(save / "checkpoints"))] = str(offline / "checkpoints")
    argv_off[argv_off.index(str(save / "logs"))] = str(offline / "logs")
    argv_off[argv_off.index("generate")] = "raise"
    proc_off = run([str(BIN / "speculators"), *argv_off], cwd=tmp_path, timeout=600)
    assert [float(x) for x in _LOSS.findall(proc_off.stdout + proc_off.stderr)] == (
        losses
    )
    online_draft = load_file(save / "checkpoints" / "0" / "model.safetensors")
    offline_draft = load_file(offline / "checkpoints" / "0" / "model.safetensors")
    assert online_draft.keys() == offline_draft.keys()
    assert all(torch.equal(online_draft[k], offline_draft[k]) for k in online_draft)


def test_online_training_without_a_working_server_is_one_line(
    kimi, tmp_path, monkeypatch, capsys
):
    """No server at the endpoint: ``train`` stops before the first step in one
    line (it trained at loss 0 and exited 0); a server extracting other layers
    than the draft's (the final state among its ids: one state short) is refused
    by the same check, before any worker asks it."""
    from speculators.train.data import ArrowDataset
    from speculators.train.data_checks import (
        DataCheckError,
        check_generation_endpoint,
    )

    data = rows_dataset(tmp_path / "data", ROWS)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    save = tmp_path / "run"
    argv = _online_train_argv(kimi, data, closed, tmp_path, save)
    code, err = console_in_process(["speculators", *argv], monkeypatch, capsys)
    assert code == 1, err[-2000:]
    assert (
        f"error: DataCheckError: cannot reach a vLLM server at --vllm-endpoint "
        f"{closed}" in err
    )
    assert "Traceback" not in err
    assert not (save / "checkpoints").exists() or not any(
        (save / "checkpoints").iterdir()
    )

    with VllmHiddenStatesServer(kimi, tmp_path / "storage", layer_ids=[2, 4, 8]) as s:
        dataset = ArrowDataset(
            max_len=32, datapath=data, vllm_endpoint=s.endpoint, model=str(kimi)
        )
        hidden = int(s.verifier.text_config.hidden_size)
        with pytest.raises(DataCheckError, match="extracts 3 hidden states"):
            check_generation_endpoint(dataset, num_entries=4, hidden_size=hidden)
    assert list((tmp_path / "storage").iterdir()) == []
