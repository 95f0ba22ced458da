import runpy
import sys

import pytest

from speculators import __main__ as speculators_main
from speculators.train.config.resolution import ConfigError
from speculators.utils.cli_errors import (
    TRACEBACK_ENV,
    ModelSourceError,
    check_model_source,
    run_cli,
)
from speculators.utils.text_config import load_config_dict


def test_missing_local_path_does_not_exist(tmp_path):
    with pytest.raises(ModelSourceError, match="local path does not exist"):
        check_model_source(str(tmp_path / "no" / "such"), "--model")


def test_directory_without_config_json(tmp_path):
    with pytest.raises(ModelSourceError, match=r"config\.json does not exist"):
        check_model_source(str(tmp_path), "--model")


def test_invalid_config_json_names_the_file(tmp_path):
    (tmp_path / "config.json").write_text('{"hidden_size": 64,')
    with pytest.raises(ModelSourceError, match=str(tmp_path / "config.json")):
        check_model_source(str(tmp_path), "--model")
    with pytest.raises(ModelSourceError, match="not valid JSON"):
        load_config_dict(tmp_path)


def test_invalid_hub_id():
    with pytest.raises(ModelSourceError, match="neither an existing local path"):
        check_model_source("bad id!", "--model")


def test_offline_hub_id_names_the_id_and_offline_mode(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelSourceError) as exc_info:
        check_model_source("org/never-cached-model-xyz", "--verifier-name-or-path")
    assert "org/never-cached-model-xyz" in str(exc_info.value)
    assert "HF_HUB_OFFLINE" in str(exc_info.value)


def test_run_cli_reports_a_known_error_in_one_line(capsys, monkeypatch):
    monkeypatch.delenv(TRACEBACK_ENV, raising=False)
    monkeypatch.delenv("RANK", raising=False)

    def fail() -> None:
        raise ConfigError("--foo cannot be 3; use 1 or 2.")

    with pytest.raises(SystemExit) as exc_info:
        run_cli(fail)
    assert exc_info.value.code == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "error: ConfigError: --foo cannot be 3; use 1 or 2.",
        f"(set {TRACEBACK_ENV}=1 to see the traceback)",
    ]


def test_run_cli_reports_once_under_torchrun(capsys, monkeypatch):
    monkeypatch.delenv(TRACEBACK_ENV, raising=False)

    def fail() -> None:
        raise ConfigError("bad")

    for rank, reported in (("0", True), ("3", False)):
        monkeypatch.setenv("RANK", rank)
        with pytest.raises(SystemExit) as exc_info:
            run_cli(fail)
        assert exc_info.value.code == 1
        assert ("error: ConfigError: bad" in capsys.readouterr().err) is reported


def test_run_cli_keeps_tracebacks_on_request_and_for_bugs(monkeypatch):
    def fail() -> None:
        raise ConfigError("bad")

    monkeypatch.setenv(TRACEBACK_ENV, "1")
    with pytest.raises(ConfigError):
        run_cli(fail)
    monkeypatch.delenv(TRACEBACK_ENV)
    with pytest.raises(ZeroDivisionError):
        run_cli(lambda: 1 / 0)


def _speculators_train(argv: list[str]) -> None:
    """``speculators train ARGV``, as the console script runs it."""
    sys.argv = ["speculators", "train", *argv]
    speculators_main.app()


def _python_m_speculators_train(argv: list[str]) -> None:
    """``python -m speculators.train ARGV`` (what torchrun launches)."""
    sys.argv = ["speculators.train", *argv]
    runpy.run_module("speculators.train", run_name="__main__", alter_sys=True)


@pytest.mark.parametrize(
    "entry",
    [_speculators_train, _python_m_speculators_train],
    ids=["speculators-train", "python-m-speculators.train"],
)
def test_train_commands_report_a_missing_verifier(
    tmp_path, monkeypatch, capsys, entry
):
    monkeypatch.delenv(TRACEBACK_ENV, raising=False)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setattr(sys, "argv", sys.argv)
    missing = tmp_path / "no-such-verifier"
    with pytest.raises(SystemExit) as exc_info:
        entry(["--verifier-name-or-path", str(missing), "--data-path", str(tmp_path)])
    assert exc_info.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"{missing}: the local path does not exist" in err


@pytest.mark.parametrize(
    "entry",
    [_speculators_train, _python_m_speculators_train],
    ids=["speculators-train", "python-m-speculators.train"],
)
def test_train_usage_names_the_command(monkeypatch, capsys, entry):
    monkeypatch.setattr(sys, "argv", sys.argv)
    with pytest.raises(SystemExit) as exc_info:
        entry(["--help"])
    assert exc_info.value.code == 0
    assert capsys.readouterr().out.startswith("usage: speculators train [-h]")
