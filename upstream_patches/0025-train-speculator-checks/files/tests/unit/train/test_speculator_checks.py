"""Speculator types that cannot train with the verifier or flags given are refused
before any work, in one line that says why and what to use instead."""

import sys

import numpy as np
import pytest
import torch
from datasets import Dataset
from safetensors.torch import load_file, save_file

from speculators import __main__ as speculators_main
from speculators.train.config import TrainConfig
from speculators.train.config.resolution import ConfigError
from speculators.train.speculator_checks import check_speculator_type
from speculators.utils.cli_errors import TRACEBACK_ENV
from tests.unit.mock import verifier_checkpoints, verifiers

SMALL = str(verifiers.VOCAB // 2)


def _dataset(path):
    Dataset.from_dict(
        {"input_ids": [[1, 2, 3]], "loss_mask": [[0, 1, 1]], "seq_len": [3]}
    ).save_to_disk(str(path))
    torch.save(dict.fromkeys(range(verifiers.VOCAB), 1), path / "token_freq.pt")
    return path


def _config(verifier, data, speculator_type, *flags):
    argv = ["--verifier-name-or-path", str(verifier), "--data-path", str(data)]
    argv += ["--speculator-type", speculator_type, *flags]
    return TrainConfig.resolve(argv)


def _train(monkeypatch, capsys, *argv):
    monkeypatch.delenv(TRACEBACK_ENV, raising=False)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setattr(sys, "argv", ["speculators", "train", *argv])
    with pytest.raises(SystemExit) as exc_info:
        speculators_main.app()
    assert exc_info.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_dflash2_with_a_reduced_vocabulary_stops_before_any_work(
    tmp_path, monkeypatch, capsys
):
    verifier = verifier_checkpoints.llama(tmp_path).path
    data = _dataset(tmp_path / "data")
    save = tmp_path / "run"
    err = _train(
        monkeypatch,
        capsys,
        *["--verifier-name-or-path", str(verifier), "--data-path", str(data)],
        *["--speculator-type", "dflash2", "--draft-vocab-size", SMALL],
        *["--save-path", str(save)],
    )
    assert "ConfigError: --speculator-type dflash2 needs the verifier's full" in err
    assert f"--draft-vocab-size {SMALL} asks for a reduced one" in err
    assert f"--draft-vocab-size {verifiers.VOCAB}" in err
    # Nothing written: no run.yaml, no cached vocabulary mapping.
    assert not save.exists()
    assert not list(data.glob("*.npy"))


def test_full_vocabulary_algorithms(tmp_path):
    verifier = verifiers.llama(tmp_path / "llama")
    data = _dataset(tmp_path / "data")
    d2t = tmp_path / "d2t.npy"
    np.save(d2t, np.zeros(int(SMALL), dtype=np.int64))
    reduced = (
        ["--draft-vocab-size", SMALL],
        ["--d2t-path", str(d2t), "--t2d-path", str(d2t)],
    )
    for flags in reduced:
        for speculator_type, extra in (("dflash2", []), ("xpress", ["--ce-from-data"])):
            cfg = _config(verifier, data, speculator_type, *extra, *flags)
            with pytest.raises(ConfigError, match="needs the verifier's full vocab"):
                check_speculator_type(cfg)
    # Allowed: the full vocabulary, or an algorithm that takes a reduced one.
    full = ["--draft-vocab-size", str(verifiers.VOCAB)]
    check_speculator_type(_config(verifier, data, "dflash2", *full))
    check_speculator_type(_config(verifier, data, "dflash2"))
    for speculator_type in ("xpress", "dflash", "dspark", "peagle", "eagle3"):
        check_speculator_type(
            _config(verifier, data, speculator_type, "--draft-vocab-size", SMALL)
        )


def test_mtp_needs_the_verifiers_own_mtp_layer(tmp_path):
    data = _dataset(tmp_path / "data")
    kimi = verifiers.kimi_k25_native(tmp_path / "kimi")
    with pytest.raises(ConfigError, match="has none that speculators can train"):
        check_speculator_type(_config(kimi, data, "mtp"))

    qwen3 = verifier_checkpoints.qwen3_tied(tmp_path).path
    with pytest.raises(ConfigError, match=r"has no 'mtp\.\*' weights"):
        check_speculator_type(_config(qwen3, data, "mtp"))
    # The same checkpoint with its MTP layer passes.
    weights = qwen3 / "model.safetensors"
    tensors = load_file(str(weights))
    tensors["mtp.fc.weight"] = torch.zeros(verifiers.HIDDEN, 2 * verifiers.HIDDEN)
    save_file(tensors, str(weights))
    check_speculator_type(_config(qwen3, data, "mtp"))
