"""``speculators prepare-data`` and its dataset loader with the local renderer, run
in the test's own process as the data-generation tests call them."""

import sys
from pathlib import Path

import pytest

from speculators import __main__ as speculators_main
from speculators.data_generation.preprocessing import load_and_preprocess_dataset


def run_prepare_data(
    monkeypatch: pytest.MonkeyPatch, model: Path, data: Path, out: Path
) -> int | str | None:
    """``speculators prepare-data --render-endpoint local`` on one worker; the code
    it exits with."""
    argv = ["speculators", "prepare-data", "--model", str(model), "--data", str(data)]
    argv += ["--output", str(out), "--render-endpoint", "local", "--trust-remote-code"]
    monkeypatch.setattr(sys, "argv", [*argv, "--num-preprocessing-workers", "1"])
    with pytest.raises(SystemExit) as exc_info:
        speculators_main.app()
    return exc_info.value.code


def load_locally(model: Path, data: Path, **kwargs):
    """``load_and_preprocess_dataset`` of one file, rendered locally on one worker."""
    return load_and_preprocess_dataset(
        str(model),
        [str(data)],
        seq_length=512,
        build_dataset_num_proc=1,
        render_endpoint="local",
        trust_remote_code=True,
        **kwargs,
    )
