"""The verifier architectures vLLM 0.34 takes no aux hidden states from
(`speculators_kimi.served_verifiers`), against vLLM 0.34.0's wheel in the scratch
environment of `vllm-check`: vLLM's own ``supports_eagle3`` for every class that
imports there, the wheel's source (``tests/support/vllm_eagle3_scan.py``) for
the rest; and what `doctor` says of such a verifier."""

from __future__ import annotations

import json
import os
from pathlib import Path

from helpers import SUPPORT, run
from vllm_eagle3_scan import eagle3_architectures

from speculators_kimi.served_verifiers import WITHOUT_EAGLE3, aux_states_note
from speculators_kimi.vllm_check.env import default_env, ensure_env


def _cpu_stand_in(module: str) -> bool:
    """A class vLLM's CPU platform loads in place of the one a GPU serves."""
    return ".cpu." in module or module.rsplit(".", 1)[-1].endswith("stub")


def test_the_list_is_vllms_own_answer():
    python = ensure_env(default_env())
    proc = run(
        [str(python), str(SUPPORT / "vllm_eagle3_probe.py")],
        env={
            "VLLM_TARGET_DEVICE": "cpu",
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        },
        timeout=300,
    )
    probe = json.loads(proc.stdout.strip().splitlines()[-1])
    from_source = eagle3_architectures(Path(probe["vllm"]))
    assert set(from_source) == set(probe["architectures"])
    imported = {a: r for a, r in probe["architectures"].items() if r is not None}
    assert len(imported) > len(from_source) // 2, "too few classes imported"
    # The source reading agrees with vLLM wherever vLLM can answer.
    disagree = {
        arch: yes
        for arch, (module, yes) in imported.items()
        if not _cpu_stand_in(module) and yes != from_source[arch]
    }
    assert not disagree, disagree
    without = {arch for arch, yes in from_source.items() if not yes}
    assert without == WITHOUT_EAGLE3, (
        "regenerate speculators_kimi/served_verifiers.py "
        "(python tests/support/vllm_eagle3_scan.py SITE-PACKAGES/vllm): "
        f"missing {sorted(without - WITHOUT_EAGLE3)}, "
        f"extra {sorted(WITHOUT_EAGLE3 - without)}"
    )
    # The verifiers this project is for, as vLLM answered them.
    for arch, served in (
        ("KimiK25ForConditionalGeneration", True),
        ("DeepseekV3ForCausalLM", True),
        ("LlamaForCausalLM", True),
        ("Gemma3ForCausalLM", False),
        ("Lfm2ForCausalLM", False),
        ("MixtralForCausalLM", False),
    ):
        assert imported[arch][1] is served, arch


def test_the_note_names_the_class_and_the_way_to_serve_it():
    note = aux_states_note(["Gemma3ForConditionalGeneration"])
    assert note is not None
    assert "vLLM 0.34.0's own Gemma3ForConditionalGeneration" in note
    assert "--model-impl transformers" in note
    # vLLM's own class takes them; an unregistered one runs on the Transformers
    # backend, which does; a config without architectures says nothing.
    for architectures in (
        ["KimiK25ForConditionalGeneration"],
        ["MyOwnForCausalLM"],
        [],
    ):
        assert aux_states_note(architectures) is None


def test_export_notes_a_verifier_vllm_takes_no_aux_states_from(
    tiny_draft_checkpoint, tmp_path, capsys
):
    """The draft's recorded verifier class decides: LlamaForCausalLM serves as
    printed; a draft recorded for Mixtral gets the note after the commands."""
    from speculators_kimi import cli

    argv = ["export", str(tiny_draft_checkpoint), "--verifier-id", "org/model"]
    assert cli.main([*argv, "--out", str(tmp_path / "llama")]) == 0
    assert "note:" not in capsys.readouterr().out
    config_file = tiny_draft_checkpoint / "config.json"
    config = json.loads(config_file.read_text())
    config["speculators_config"]["verifier"]["architectures"] = ["MixtralForCausalLM"]
    config_file.write_text(json.dumps(config))
    assert cli.main([*argv, "--out", str(tmp_path / "mixtral")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"note: {aux_states_note(['MixtralForCausalLM'])}"
    assert out[-2].startswith("  vllm serve org/model --speculative-config")


def test_vllm_check_notes_what_loading_the_draft_alone_cannot_see(tmp_path):
    """vllm-check loads the draft, never the verifier's class: the note comes
    from the verifier's config.json, for the release the list describes."""
    from speculators_kimi.vllm_check.cli import _verifier_note

    (tmp_path / "config.json").write_text(
        json.dumps({"architectures": ["Gemma3ForConditionalGeneration"]})
    )
    assert _verifier_note(str(tmp_path), "0.34.0") == aux_states_note(
        ["Gemma3ForConditionalGeneration"]
    )
    assert _verifier_note(str(tmp_path), "0.33.0") is None
    (tmp_path / "config.json").write_text(json.dumps({"architectures": []}))
    assert _verifier_note(str(tmp_path), "0.34.0") is None
