"""`speculators-kimi doctor --speculator-type ALGO [-- TRAIN FLAGS]`: before
training, the block drafter `speculators train` would build from the same flags
and how vLLM 0.34 serves it, or why it cannot (export's own refusal, training's
own refusals before any work), on the tiny Kimi-K2.5 of the demo."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from helpers import doctor_report, parameter_counts

torch = pytest.importorskip("torch")
pytest.importorskip("speculators.train.speculator_checks")

from speculators_kimi import cli  # noqa: E402

HUB_ID = "moonshotai/Kimi-K2.5"
BLOCK = 4

#: doctor's flags for each block drafter vLLM 0.34 serves.
SERVED = {
    "dflash": ["--speculator-type", "dflash"],
    "dflash2": ["--speculator-type", "dflash2"],
    "dspark": ["--speculator-type", "dspark"],
    "dspark-mla": ["--speculator-type", "dspark", "--draft-arch", "deepseek_v3"],
    "xpress": ["--speculator-type", "xpress"],
}


@pytest.fixture(scope="module")
def kimi_tiny(tmp_path_factory) -> Path:
    from speculators_kimi.tiny_verifier import build_kimi_tiny

    return build_kimi_tiny(tmp_path_factory.mktemp("kimi") / "verifier")


def _trained(verifier: Path, flags: list[str], out: Path):
    """The draft `speculators train` builds from ``flags`` (its own builder, the
    verifier's weights loaded), saved as it saves it."""
    from speculators import SpeculatorModel
    from speculators.train.cli import build_draft_model
    from speculators.train.config import TrainConfig

    argv = ["--verifier-name-or-path", str(verifier), "--data-path", "unused"]
    cfg = TrainConfig.resolve([*argv, *flags, "--block-size", str(BLOCK)])
    args = argparse.Namespace(**cfg.flatten())
    vocab = json.loads((verifier / "config.json").read_text())["text_config"]
    model_class = SpeculatorModel.registry[cfg.speculator_type]  # type: ignore[index]
    model = build_draft_model(args, model_class, None, None, vocab["vocab_size"])
    model.save_pretrained(out)
    return model


@pytest.mark.parametrize("case", list(SERVED))
def test_the_plan_is_the_draft_train_builds_and_export_serves(
    kimi_tiny, tmp_path, capsys, case
):
    """doctor's draft, parameter counts and serving are those of the draft
    `speculators train` builds from the same flags (``--block-size`` given after
    ``--``) and of what `export` then writes."""
    from speculators_kimi.export import export_draft

    code, report = doctor_report(
        capsys, str(kimi_tiny), *SERVED[case], "--", "--block-size", str(BLOCK)
    )
    assert code == 0, report["problems"]
    model = _trained(kimi_tiny, SERVED[case], tmp_path / "draft")
    memory = report["estimated_memory"]
    counts = parameter_counts(model)
    assert {name: memory[name] for name in counts} == counts
    assert f"block_size={BLOCK}" in memory["assumptions"]
    shown = report["draft_config"]
    assert shown["block_size"] == model.config.block_size == BLOCK
    assert shown["mask_token_id"] == model.config.mask_token_id is not None
    assert shown["model_type"] == model.config.transformer_layer_config.model_type
    assert report["training"]["train_flags"] == ["--block-size", str(BLOCK)]

    result = export_draft(tmp_path / "draft", tmp_path / "export", verifier_id=HUB_ID)
    assert result.causality is not None  # a block drafter's
    assert report["serving"] == {
        "method": result.method,
        "layout": result.layout,
        "architecture": result.architecture,
        "num_speculative_tokens": result.num_speculative_tokens,
        "causal_layers": list(result.causality.layers),
    }


#: Flags whose draft vLLM 0.34 cannot serve, or that training refuses before
#: any work, and what the one problem must say.
REFUSED = {
    "xpress-llama": (
        ["--speculator-type", "xpress", "--draft-arch", "llama"],
        ["could not serve", "--draft-arch qwen3"],
    ),
    "xpress-reduced": (
        ["--speculator-type", "xpress", "--draft-vocab-size", "128"],
        ["could not serve", "128-token draft vocabulary", "--draft-vocab-size"],
    ),
    "dflash-anchor": (
        ["--speculator-type", "dflash", "--", "--sample-from-anchor"],
        ["could not serve", "--sample-from-anchor"],
    ),
    "dflash-mla": (
        ["--speculator-type", "dflash", "--draft-arch", "deepseek_v3"],
        ["could not serve", "--speculator-type dspark"],
    ),
    "peagle": (["--speculator-type", "peagle"], ["does not serve a peagle draft"]),
    "dflash2-reduced": (
        ["--speculator-type", "dflash2", "--draft-vocab-size", "128"],
        ["would stop before any work", "full vocabulary"],
    ),
    "dspark-mla-reduced": (
        [
            "--speculator-type",
            "dspark",
            "--draft-arch",
            "deepseek_v3",
            "--draft-vocab-size",
            "128",
        ],
        ["would stop before any work", "K3DSparkForCausalLM"],
    ),
    "unknown-train-flag": (
        ["--", "--bogus", "3"],
        ["unrecognized arguments: --bogus 3"],
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_what_vllm_cannot_serve_or_train_refuses_is_one_problem(
    kimi_tiny, capsys, case
):
    flags, said = REFUSED[case]
    code, report = doctor_report(capsys, str(kimi_tiny), *flags)
    assert code == 1
    (problem,) = report["problems"]
    for words in said:
        assert words in problem["problem"], problem
    assert report["serving"] is None


def test_a_flag_of_another_algorithm_is_noted_as_train_ignores_it(kimi_tiny, capsys):
    code, report = doctor_report(capsys, str(kimi_tiny), "--", "--markov-rank", "8")
    assert code == 0, report["problems"]
    (note,) = report["training"]["notes"]
    assert "--markov-rank" in note and "ignored" in note
    assert report["serving"]["method"] == "eagle3"


def test_only_doctor_takes_flags_after_dashes(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["export", str(tmp_path), "--out", str(tmp_path / "o"), "--", "-x"])
    assert exit_info.value.code == 2
    assert "export takes no arguments after --" in capsys.readouterr().err


def test_a_copy_without_its_tokenizer_is_planned_with_a_note(
    kimi_tiny, tmp_path, capsys
):
    """A weights-only copy: training would take the mask token from the
    tokenizer, which does not load here; the plan goes on with a note."""
    import shutil

    copy = tmp_path / "weights-only"
    copy.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(kimi_tiny / name, copy / name)
    code, report = doctor_report(capsys, str(copy), "--speculator-type", "dspark")
    assert code == 0, report["problems"]
    (note,) = report["training"]["notes"]
    assert "mask token is not resolved here" in note
    assert report["draft_config"]["mask_token_id"] is None
    assert report["serving"]["method"] == "dspark"


def test_a_flag_after_dashes_wins_over_doctors_own(kimi_tiny, capsys):
    """As in train, where a flag is given twice the later one counts."""
    code, report = doctor_report(
        capsys, str(kimi_tiny), "--draft-arch", "llama", "--", "--draft-arch", "qwen3"
    )
    assert code == 0, report["problems"]
    assert report["draft_config"]["model_type"] == "qwen3"
