"""`speculators-kimi doctor V -- --data-path DATA ...`: the data of a train
command checked as training checks it before its first step (its own checks),
on the demo's verifier, prepared data and hidden states."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import doctor_report

pytest.importorskip("speculators.train.data_checks")


@pytest.mark.parametrize("algorithm", ["eagle3", "dflash"])
def test_the_demos_data_is_what_its_draft_trains_on(trained_demo, capsys, algorithm):
    """The demo's states serve an EAGLE-3 draft and a DFlash draft of the same
    aux layers alike."""
    data = trained_demo["data"]
    code, report = doctor_report(
        capsys,
        trained_demo["verifier"],
        "--speculator-type",
        algorithm,
        "--",
        "--data-path",
        data,
    )
    assert code == 0, report["problems"]
    assert report["data"] == {
        "data_path": data,
        "hidden_states": str(Path(data) / "hidden_states"),
        "aux_layers": trained_demo["target_layer_ids"],
        "asks_vllm_for_states": False,
    }


def test_states_of_other_layers_or_torn_are_one_problem(trained_demo, tmp_path, capsys):
    """Other --target-layer-ids than the files record; then a copy of the data
    with one file cut short: each one problem naming the file."""
    verifier, data = trained_demo["verifier"], trained_demo["data"]
    ids = [str(i - 1) for i in trained_demo["target_layer_ids"]]
    code, report = doctor_report(
        capsys, verifier, "--", "--data-path", data, "--target-layer-ids", *ids
    )
    assert code == 1
    (problem,) = report["problems"]
    assert (
        "hs_0.safetensors holds the states of the verifier's layers"
        in (problem["problem"])
    )
    assert report["data"] is None

    copy = Path(shutil.copytree(data, tmp_path / "data"))
    torn = copy / "hidden_states" / "hs_7.safetensors"
    torn.write_bytes(torn.read_bytes()[:100])
    code, report = doctor_report(capsys, verifier, "--", "--data-path", str(copy))
    assert code == 1
    (problem,) = report["problems"]
    assert "hs_7.safetensors" in problem["problem"]


def test_a_path_that_is_no_prepared_dataset_stops_before_the_plan(
    trained_demo, tmp_path, capsys
):
    """Training refuses it before any work; doctor plans no draft for it."""
    (tmp_path / "conversations.jsonl").write_text('{"messages": []}\n')
    code, report = doctor_report(
        capsys, trained_demo["verifier"], "--", "--data-path", str(tmp_path)
    )
    assert code == 1
    (problem,) = report["problems"]
    assert problem["problem"].startswith("speculators train would stop on its data")
    assert str(tmp_path) in problem["problem"]
    assert report["draft_config"] is None and report["data"] is None
