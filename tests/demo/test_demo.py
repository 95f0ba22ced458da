"""`speculators-kimi demo` end to end, in a smaller setting (fewer samples/epochs)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import demo_command, demo_output, run
from safetensors.torch import load_file

from speculators_kimi.demo import (
    DemoSettings,
    load_conversations,
    run_demo,
)
from speculators_kimi.demo.report import format_report
from speculators_kimi.tiny_verifier import KIMI_ARCHITECTURE, TEXT_PREFIX, KimiTinySpec


def test_shipped_dataset():
    convs = load_conversations()
    assert 150 <= len(convs) <= 300
    for conv in convs:
        assert [t["role"] for t in conv][:2] == ["user", "assistant"]
        assert all(t["content"].strip() for t in conv)


def test_demo_end_to_end(trained_demo):
    """The session's demo run (the CLI, 80 conversations, 3 epochs): every stage
    ran, the loss fell, the draft belongs to the Kimi verifier and took its
    embedding, head and norm from `language_model.`."""
    text, report = trained_demo["stdout"], trained_demo
    out = Path(report["out"])
    for stage in STAGES:
        assert f"stage {stage}: finished" in text, text[-3000:]
    assert report["loss_last"] < 0.5 * report["loss_first"], report
    assert report["val_step0_accuracy"] is not None
    assert report["verifier_architectures"] == [KIMI_ARCHITECTURE]
    assert report["target_layer_ids"] == [2, 4, 5]

    ckpt = out / "run" / "checkpoints" / report["checkpoint"].rsplit("/", 1)[-1]
    config = json.loads((ckpt / "config.json").read_text())
    # The aux layers the trainer defaulted to are those we generated.
    assert config["eagle_aux_hidden_state_layer_ids"] == report["target_layer_ids"]
    verifier_info = config["speculators_config"]["verifier"]
    assert verifier_info["architectures"] == [KIMI_ARCHITECTURE]
    layer = config["transformer_layer_config"]
    spec = KimiTinySpec()
    assert layer["hidden_size"] == spec.hidden_size
    assert layer["vocab_size"] == spec.vocab_size

    # The trainer took the verifier's own embedding/head/norm from `language_model.`.
    from speculators import SpeculatorModel

    model = SpeculatorModel.from_pretrained(str(ckpt))
    verifier = load_file(out / "verifier" / "model.safetensors")
    state = model.state_dict()
    pairs = {
        "embed_tokens.weight": "model.embed_tokens.weight",
        "verifier_lm_head.weight": "lm_head.weight",
        "verifier_norm.weight": "model.norm.weight",
    }
    assert report["draft_vocab_size"] == 256
    for draft_key, text_key in pairs.items():
        want = verifier[TEXT_PREFIX + text_key].to(state[draft_key].dtype)
        if draft_key == "verifier_lm_head.weight":  # the draft vocabulary's rows
            want = want[state["t2d"]]
        assert torch.equal(state[draft_key], want), draft_key


def test_the_demo_trains_a_dspark_draft_beside_eagle3(trained_mla_demo):
    """`--block-drafter dspark`: upstream's trainer builds a DSpark draft on the
    same data, `evaluate` decodes the same held-out prompts with it losslessly,
    and the report prints its acceptance length beside the EAGLE-3 draft's."""
    block = trained_mla_demo["block_drafter"]
    assert block["algorithm"] == "dspark"
    assert len(block["losses"]) == 4, block["command"]
    config = json.loads((Path(block["checkpoint"]) / "config.json").read_text())
    assert config["speculators_model_type"] == "dspark"
    assert config["block_size"] == 4
    result = block["trained"]
    assert result["lossless"] is True
    assert result["num_speculative_tokens"] == 3
    assert result["mean_acceptance_length"] >= 1.0
    assert (
        result["num_prompts"]
        == trained_mla_demo["acceptance"]["trained"]["num_prompts"]
    )
    text = format_report(trained_mla_demo)
    assert text.startswith("EAGLE-3 and DSpark demo")
    al = f"{result['mean_acceptance_length']:.3f} DSpark trained, greedy"
    assert al in text


def test_an_xpress_block_drafter_keeps_the_full_vocabulary(tmp_path):
    """`--block-drafter xpress`: vLLM serves XPress only with the verifier's
    whole vocabulary, so its training line names no draft vocabulary (the
    demo's other drafts keep their 256 of 512)."""
    from speculators_kimi.demo import DemoSettings, train_argv

    def argv(drafter: str) -> list[str]:
        settings = DemoSettings(block_drafter=drafter)
        return train_argv(
            tmp_path / "v", tmp_path / "d", tmp_path / "r", settings, True
        )

    assert "--draft-vocab-size" not in argv("xpress")
    assert "xpress" in argv("xpress")
    dspark = argv("dspark")
    assert dspark[dspark.index("--draft-vocab-size") + 1] == "256"


def test_demo_rerun_reuses_then_redoes_training(trained_demo, tmp_path):
    """On a copy of the session's demo: an unchanged rerun reuses every stage;
    a train-only flag changed redoes training alone, from scratch."""
    out = tmp_path / "demo"
    shutil.copytree(trained_demo["out"], out, symlinks=True)
    cmd = demo_command(out)
    report = {k: v for k, v in trained_demo.items() if k != "stdout"}
    ckpt = out / "run" / "checkpoints" / report["checkpoint"].rsplit("/", 1)[-1]
    mtimes = {p: p.stat().st_mtime_ns for p in ckpt.iterdir() if p.is_file()}
    again_report, again = demo_output(run(cmd, timeout=600))
    for stage in STAGES:
        assert f"stage {stage}: done before, reusing" in again
    assert "--speculator-type" not in again
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes
    assert again_report["loss_last"] == report["loss_last"]

    # A train-only flag changed: training alone is redone, from scratch (the old
    # run's checkpoints are gone, nothing resumes from them).
    inputs = _mtimes(out / "verifier", out / "data")
    # Epoch 0 of the 3-epoch run: what a 1-epoch run from scratch repeats.
    first_epoch = ckpt.parent / "0" / "training_state.json"
    steps = json.loads(first_epoch.read_text())["global_step"]
    assert ckpt.name == "2"
    third_report, third = demo_output(run([*cmd, "--epochs", "1"], timeout=600))
    for stage in ("verifier", "replies", "data", "hidden-states"):
        assert f"stage {stage}: done before, reusing" in third
    assert (
        "[demo] train: inputs changed (epochs 3 -> 1); redoing train, acceptance\n"
        in third
    )
    assert "stage train: finished" in third
    assert "Found checkpoint at" not in third
    assert _mtimes(out / "verifier", out / "data") == inputs
    checkpoints = out / "run" / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir() if p.name.isdigit()) == ["0"]
    state = json.loads((checkpoints / "0" / "training_state.json").read_text())
    assert state["global_step"] == steps
    assert third_report["checkpoint"].endswith("/0")


STAGES = ("verifier", "replies", "data", "hidden-states", "train", "acceptance")


@pytest.mark.parametrize("fresh", [False, True])
def test_demo_refuses_a_directory_it_did_not_write(tmp_path, fresh):
    """``--fresh`` removed the whole ``--out``, and a rerun replaced a ``data/``
    or ``verifier/`` it had not written: a directory with files but no demo
    stage records is refused before anything is touched."""
    from speculators_kimi.errors import CommandError

    out = tmp_path / "mywork"
    (out / "data").mkdir(parents=True)
    (out / "data" / "mine.txt").write_text("mine")
    (out / "results.csv").write_text("x")
    before = _mtimes(out)
    with pytest.raises(CommandError, match=r"holds files no demo wrote \(data, "):
        run_demo(DemoSettings(out=out, fresh=fresh))
    assert _mtimes(out) == before


def _mtimes(*dirs: Path) -> dict[Path, int]:
    """Every file under ``dirs`` with its modification time."""
    return {p: p.stat().st_mtime_ns for d in dirs for p in d.rglob("*") if p.is_file()}


def _rows(data: Path) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    from datasets import load_from_disk

    dataset = load_from_disk(str(data)).with_format(None)
    pairs = zip(dataset["input_ids"], dataset["loss_mask"], strict=True)
    return sorted((tuple(map(int, i)), tuple(map(int, m))) for i, m in pairs)


@pytest.mark.slow
def test_demo_rerun_redoes_the_stages_whose_inputs_changed(tmp_path):
    from transformers import PreTrainedTokenizerFast

    from speculators_kimi.datagen import HS_DIRNAME

    out = tmp_path / "demo"
    data, hs = out / "data", out / "data" / HS_DIRNAME

    def demo(num_samples: int) -> str:
        """The demo's lines, as the command line shows them (in process the
        library only logs)."""
        lines: list[str] = []

        class Lines(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                lines.append(f"[demo] {record.getMessage()}\n")

        handler = Lines()
        logger = logging.getLogger("speculators_kimi.demo")
        logger.addHandler(handler)
        level = logger.level
        logger.setLevel(logging.INFO)
        try:
            run_demo(DemoSettings(out=out, num_samples=num_samples, train=False))
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
        return "".join(lines)

    def expected_rows(n: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        # A row per reply, with the turns before it: what follows the last
        # `<|assistant|>` is trained.
        tokenizer = PreTrainedTokenizerFast.from_pretrained(out / "verifier")
        reply = tokenizer.convert_tokens_to_ids("<|assistant|>")
        # The replies the verifier wrote for the first n conversations.
        replies = out / "replies.jsonl"
        convs = [json.loads(line)["conversations"] for line in replies.open()]
        assert len(convs) == n
        assert [[t["role"] for t in c] for c in convs] == [
            [t["role"] for t in c] for c in load_conversations(n)
        ]
        rows = []
        for conv in convs:
            for k in range(1, len(conv), 2):
                ids = tokenizer.apply_chat_template(
                    conv[: k + 1], tokenize=True, return_dict=False
                )
                start = len(ids) - ids[::-1].index(reply)
                rows.append((tuple(ids), (0,) * start + (1,) * (len(ids) - start)))
        return sorted(rows)

    demo(12)
    assert len(list(hs.glob("hs_*.safetensors"))) == len(expected_rows(12)) == 13
    verifier = _mtimes(out / "verifier")

    # Fewer samples: data and hidden states are redone, the verifier is reused,
    # and no row or hidden-state file of the 12-sample run is left.
    text = demo(6)
    assert "stage verifier: done before, reusing" in text
    assert (
        "[demo] replies: inputs changed (num_samples 12 -> 6); "
        "redoing replies, data, hidden-states\n" in text
    ), text
    assert "stage hidden-states: running" in text
    assert _mtimes(out / "verifier") == verifier
    assert _rows(data) == expected_rows(6)
    assert sorted(p.name for p in hs.iterdir()) == sorted(
        f"hs_{i}.safetensors" for i in range(len(expected_rows(6)))
    )
    marker = json.loads((out / ".stages" / "replies").read_text())
    assert marker["inputs"]["num_samples"] == 6
    marker = json.loads((out / ".stages" / "data").read_text())
    assert marker["result"]["samples"] == len(expected_rows(6))

    # Unchanged: every stage is reused and no output is rewritten.
    before = _mtimes(out)
    text = demo(6)
    for stage in ("verifier", "replies", "data", "hidden-states"):
        assert f"stage {stage}: done before, reusing" in text
    assert "running" not in text
    assert _mtimes(out) == before

    # A marker of the previous format (no recorded inputs) counts as changed.
    old = out / ".stages" / "hidden-states"
    old.write_text(json.dumps({"written": 6, "target_layer_ids": [2, 4, 5]}) + "\n")
    text = demo(6)
    assert (
        "[demo] hidden-states: inputs changed (no recorded inputs: made by an "
        "older demo); redoing hidden-states\n" in text
    ), text
    assert "stage data: done before, reusing" in text
    after = _mtimes(out)
    redone = (hs, out / ".stages")
    assert all(after[p] == t for p, t in before.items() if p.parent not in redone)
    assert all(after[p] > before[p] for p in hs.iterdir())


# --------------------------------------------------------------------------- slow


def _demo_until_first_checkpoint(cmd: list[str], out: Path) -> str:
    """Run the demo CLI and kill it (trainer included) after epoch 0's checkpoint."""
    ckpt = out / "run" / "checkpoints" / "0"
    log = out.parent / "killed.log"
    start = time.time_ns()

    def saved() -> bool:  # by this run (an earlier one's may still be there)
        try:
            return (ckpt / "val_metrics.json").stat().st_mtime_ns >= start
        except FileNotFoundError:
            return False

    with log.open("w") as sink:
        proc = subprocess.Popen(
            cmd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            if saved():
                os.killpg(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.02)
        proc.wait()
    text = log.read_text()
    assert proc.returncode == -signal.SIGKILL, text[-3000:]
    assert not (ckpt.parent / "1").exists()
    return text


@pytest.mark.slow
def test_demo_interrupted_training(tmp_path):
    """The demo's own resume (its stage markers) after SIGKILL: a changed train
    flag starts over, an unchanged rerun resumes. The trainer's resume itself is
    tests/upstream/test_train_cpu.py's."""
    out = tmp_path / "demo"
    base = [sys.executable, "-m", "speculators_kimi.demo", "--out", str(out)]
    cmd = [*base, "--num-samples", "10", "--epochs", "2"]
    _demo_until_first_checkpoint(cmd, out)

    # Rerun with another train flag: the unfinished training is not resumed.
    changed = [*base, "--num-samples", "10", "--epochs", "3"]
    text = _demo_until_first_checkpoint(changed, out)
    for stage in ("verifier", "replies", "data", "hidden-states"):
        assert f"stage {stage}: done before, reusing" in text
    assert (
        "[demo] train: inputs changed since an unfinished run (epochs 2 -> 3); "
        "redoing train, acceptance\n" in text
    ), text[-3000:]
    assert "Found checkpoint at" not in text
    ckpt0 = out / "run" / "checkpoints" / "0"
    kept = {n: (ckpt0 / n).read_bytes() for n in ("model.safetensors", "config.json")}

    # Rerun unchanged: training resumes from the checkpoint it left.
    again = run(changed, timeout=600).stdout
    assert "[demo] stage train: resuming an unfinished run (inputs unchanged)" in again
    assert "Found checkpoint at" in again and "Resuming training on epoch 2" in again
    for name, content in kept.items():
        assert (ckpt0 / name).read_bytes() == content, name
    assert (out / "run" / "checkpoints" / "2").is_dir()
    assert not (out / ".stages" / "train.started").exists()
    marker = json.loads((out / ".stages" / "train").read_text())
    assert marker["inputs"]["epochs"] == 3
