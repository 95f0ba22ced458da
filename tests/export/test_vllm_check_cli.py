"""``vllm-check``'s verdict and refusals: it fails (exit 1, one line per
finding) on what would make vLLM serve a draft other than the trained one (the
reports are the shapes the checks in ``test_export*.py`` produce from vLLM's own
classes), and refuses a training checkpoint given as the export."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from speculators_kimi.vllm_check.cli import _check_written_from
from speculators_kimi.vllm_check.verdict import problems

#: A passing block-drafter report (the fields the verdict reads).
PASSED = {
    "parameters_not_loaded": [],
    "causality": {"trained": [False], "vllm": [False], "as_trained": True},
    "aux_layers": {"trained": [1, 2, 3], "vllm": [1, 2, 3]},
    "one_step": {
        "max_rel_logit_diff": 2.1e-7,
        "same_argmax": True,
        "same_masked_tokens": True,
        "max_abs_confidence_diff": 3e-8,
    },
}


def changed(path: str, value: object) -> dict[str, Any]:
    report: dict[str, Any] = copy.deepcopy(PASSED)
    *parents, key = path.split(".")
    node: Any = report
    for parent in parents:
        node = node[parent]
    node[key] = value
    return report


@pytest.mark.parametrize(
    ("report", "expected"),
    [
        (PASSED, None),
        ({"parameters_not_loaded": []}, None),  # an EAGLE-3 report's fields only
        (
            changed("parameters_not_loaded", ["model.layers.0.mlp.down_proj.weight"]),
            "did not load: ['model.layers.0.mlp.down_proj.weight']",
        ),
        (
            changed(
                "causality", {"trained": [False], "vllm": [True], "as_trained": False}
            ),
            "causality [True], the draft was trained with [False]",
        ),
        (changed("aux_layers.vllm", [0, 1, 2]), "layers [0, 1, 2]"),
        (changed("one_step.max_rel_logit_diff", 0.19), "draft's by 0.19"),
        (changed("one_step.max_rel_logit_diff", float("nan")), "by nan"),
        (changed("one_step.same_argmax", False), "picks another most likely token"),
        (
            changed("one_step.same_masked_tokens", False),
            "masks out another set of tokens",
        ),
        (changed("one_step.max_abs_confidence_diff", 0.2), "confidence head"),
        (
            # XPress: vLLM drafts 1 + K slots whatever block the refiner holds
            {"serve": {"num_speculative_tokens": 4, "xpress_block_size": 4}},
            "1 + 4 slots per step against a refiner trained on blocks of 4",
        ),
        ({"serve": {"num_speculative_tokens": 3, "xpress_block_size": 4}}, None),
    ],
)
def test_problems(report, expected):
    found = problems(report)
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1, found
        assert expected in found[0], found


def test_the_text_report_names_what_the_verdict_reads():
    from speculators_kimi.vllm_check.cli import format_report

    report = changed("aux_layers.vllm", [0, 1, 2])
    report.update(
        vllm="0.34.0",
        layout="native",
        check_seconds=1.0,
        kv_cache_pages=[(4, 16, 1, 40)],
    )
    text = format_report(report)
    assert "verifier layers read: trained [1, 2, 3], vLLM [0, 1, 2] (DIFFERENT)" in text
    assert "KV cache: 1 layer(s), pages [4, 16, 1, 40], latent width 40" in text
    assert "confidence head: max difference 3e-08" in text
    assert "note:" not in text
    report["verifier_aux_states"] = "vLLM 0.34.0's own X does not implement it"
    assert format_report(report).endswith(
        "\nnote: vLLM 0.34.0's own X does not implement it"
    )


def test_a_training_checkpoint_given_as_the_export_is_refused(tmp_path, capsys):
    """Before any environment is built: vLLM would refuse it with a traceback."""
    from speculators_kimi import cli

    checkpoint = tmp_path / "checkpoints" / "0"
    checkpoint.mkdir(parents=True)
    for name in ("config.json", "training_state.json"):
        (checkpoint / name).write_text("{}")
    args = ["vllm-check", str(checkpoint), "--checkpoint", str(checkpoint)]
    assert cli.main([*args, "--verifier", str(tmp_path / "v")]) == 1
    err = capsys.readouterr().err
    assert "a training checkpoint (it holds training_state.json)" in err
    assert f"speculators-kimi export {checkpoint} --out DIR" in err


def test_an_xpress_checkpoint_given_as_the_export_is_refused(tmp_path, capsys):
    """vLLM serves XPress only in its native layout: the checkpoint itself
    would end in the scratch env's traceback."""
    from speculators_kimi import cli

    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text('{"speculators_model_type": "xpress"}')
    args = ["vllm-check", str(checkpoint), "--checkpoint", str(checkpoint)]
    assert cli.main([*args, "--verifier", str(tmp_path / "v")]) == 1
    err = capsys.readouterr().err
    assert "an XPress checkpoint, not an export" in err
    assert f"speculators-kimi export {checkpoint} --out DIR" in err


def test_num_speculative_tokens_for_a_speculators_layout_is_refused(tmp_path, capsys):
    """vLLM reads K from that layout's config.json: the flag was ignored."""
    from speculators_kimi import cli

    export = tmp_path / "export"
    export.mkdir()
    methods = [{"proposal_type": "greedy", "speculative_tokens": 4}]
    config = {"speculators_config": {"proposal_methods": methods}}
    (export / "config.json").write_text(json.dumps(config))
    args = ["vllm-check", str(export), "--checkpoint", str(export), "--verifier"]
    code = cli.main([*args, str(tmp_path), "--num-speculative-tokens", "6"])
    assert code == 1
    err = capsys.readouterr().err
    assert "--num-speculative-tokens is for a native export" in err
    assert "(speculative_tokens 4): drop the flag" in err


@pytest.mark.parametrize(
    ("exported", "kind"),
    [
        ({"speculators_model_type": "dspark"}, "dspark"),
        ({"model_type": "k3_dspark"}, "dspark"),
        ({"architectures": ["Qwen3XPressModel"]}, "xpress"),
        ({"model_type": "deepseek_v3"}, "eagle3"),  # the native MLA EAGLE-3
    ],
)
def test_a_checkpoint_of_another_kind_than_the_export_is_refused(
    tmp_path, capsys, exported, kind
):
    """Before any environment is built (it ended in an AttributeError)."""
    import json

    from speculators_kimi import cli

    export, checkpoint = tmp_path / "export", tmp_path / "ckpt"
    for path, config in ((export, exported), (checkpoint, {})):
        path.mkdir()
        (path / "config.json").write_text(json.dumps(config))
    other = "eagle3" if kind == "dspark" else "dflash"
    (checkpoint / "config.json").write_text(
        json.dumps({"speculators_model_type": other})
    )
    args = ["vllm-check", str(export), "--checkpoint", str(checkpoint)]
    assert cli.main([*args, "--verifier", str(tmp_path / "v")]) == 1
    err = capsys.readouterr().err
    assert f"export {export} is a draft of kind {kind} and --checkpoint " in err
    assert f"{checkpoint} one of kind {other}" in err


def test_a_verifier_or_run_that_is_no_checkpoint_is_named(tmp_path, capsys):
    """``--verifier nope`` was taken for a Hub id and failed in a download's
    traceback; a run's checkpoints directory was "no config.json" alone."""
    from speculators_kimi import cli

    export, run_dir = tmp_path / "export", tmp_path / "run"
    (run_dir / "checkpoint_best").mkdir(parents=True)
    export.mkdir()
    (export / "config.json").write_text('{"speculators_model_type": "eagle3"}')
    args = ["vllm-check", str(export), "--checkpoint", str(run_dir)]
    assert cli.main([*args, "--verifier", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"--checkpoint {run_dir}: no config.json; a run's checkpoints: " in err
    args = ["vllm-check", str(export), "--checkpoint", str(export)]
    assert cli.main([*args, "--verifier", "nope"]) == 1
    err = capsys.readouterr().err
    assert "--verifier nope: no such directory; pass a local copy" in err
    assert "Traceback" not in err


def test_a_verifier_of_another_geometry_is_one_line(tiny_draft_checkpoint, capsys):
    """It failed in the scratch environment's traceback (a VerifierWeightsError
    about a tensor's shape), after building the environment."""
    import json

    from speculators_kimi import cli

    other = tiny_draft_checkpoint.parent / "wide"
    other.mkdir()
    config = json.loads(
        (tiny_draft_checkpoint.parent / "verifier" / "config.json").read_text()
    )
    (other / "config.json").write_text(json.dumps({**config, "hidden_size": 48}))
    args = ["vllm-check", str(tiny_draft_checkpoint), "--checkpoint"]
    assert cli.main([*args, str(tiny_draft_checkpoint), "--verifier", str(other)]) == 1
    err = capsys.readouterr().err
    assert f"not for --verifier {other}: hidden size 32 (verifier's 48)" in err


@pytest.mark.parametrize("command", ["vllm-check", "evaluate"])
def test_torn_draft_weights_are_one_line(
    tiny_draft_checkpoint, tmp_path, capsys, command
):
    """A SafetensorError traceback inside the model's loader (export named it)."""
    import shutil

    from speculators_kimi import cli

    torn = shutil.copytree(tiny_draft_checkpoint, tmp_path / "torn")
    weights = torn / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-64])
    verifier = str(tiny_draft_checkpoint.parent / "verifier")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"conversations": [{"role": "user", "content": "w1"}]}\n')
    argv = {
        "vllm-check": [str(torn), "--checkpoint", str(torn), "--verifier", verifier],
        "evaluate": [
            "--draft",
            str(torn),
            "--verifier",
            verifier,
            "--prompts",
            str(prompts),
        ],
    }[command]
    assert cli.main([command, *argv]) == 1
    err = capsys.readouterr().err
    assert f"{weights} is torn or not a safetensors file" in err
    assert "Traceback" not in err


def test_a_checkpoint_the_export_was_not_written_from_is_refused(
    tiny_draft_checkpoint, tmp_path, capsys
):
    """Another epoch's checkpoint of the same kind and shape: vLLM's logits
    "differed from the trained draft's", which blamed vLLM; now one line before
    any environment is built. The export's own checkpoint passes the check."""
    import argparse
    import shutil

    from safetensors.torch import load_file, save_file

    from speculators_kimi import cli
    from speculators_kimi.export import export_draft

    export = tmp_path / "serve"
    export_draft(tiny_draft_checkpoint, export, verifier_id="org/verifier")
    later = tmp_path / "epoch-1"
    shutil.copytree(tiny_draft_checkpoint, later)
    tensors = load_file(later / "model.safetensors")
    tensors["fc.weight"] = tensors["fc.weight"] * 0.5
    save_file(tensors, later / "model.safetensors")
    verifier = tiny_draft_checkpoint.parent / "verifier"
    args = ["vllm-check", str(export), "--verifier", str(verifier)]
    assert cli.main([*args, "--checkpoint", str(later)]) == 1
    err = capsys.readouterr().err
    assert f"export {export} was not written from --checkpoint {later}: 1 of" in err
    assert "(e.g. fc.weight)" in err
    mine = argparse.Namespace(export=export, checkpoint=tiny_draft_checkpoint)
    weights = [p / "model.safetensors" for p in (export, tiny_draft_checkpoint)]
    _check_written_from(mine, *weights)  # no error
