"""`generate-hidden-states`: vLLM's convention, nested verifiers, resume, errors."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import reordered_words, rows_dataset, run, unread_flags
from safetensors import safe_open
from safetensors.torch import load_file
from speculators.data_generation.provenance import PROVENANCE_KEY, read_provenance
from speculators.utils.verifier_weights import VerifierWeightsError
from transformers import (
    DeepseekV3ForCausalLM,
    DeepseekV3Model,
    LlamaForCausalLM,
    LlamaModel,
)

from speculators_kimi.datagen import (
    OtherDataError,
    OtherSettingsError,
    OtherVerifierError,
    default_target_layer_ids,
    generate_hidden_states,
    plan_batches,
)
from speculators_kimi.datagen.fixture import build_dataset
from speculators_kimi.datagen.ranks import Ranks
from speculators_kimi.tiny_verifier import (
    DECODER_PREFIX,
    TEXT_PREFIX,
    KimiTinySpec,
    TinyVerifierSpec,
    build_kimi_tiny,
    build_verifier,
    write_checkpoint,
)
from speculators_kimi.verifier import capture_hidden_states, load_text_verifier
from speculators_kimi.verifier.shards import BrokenShardError

CLI = [sys.executable, "-m", "speculators_kimi.datagen"]


def _in_process(argv: list[str], capsys) -> tuple[object, str]:
    """``speculators-kimi generate-hidden-states ARGV`` in this process: its exit
    code and stderr (a refusal before any work needs no fresh interpreter)."""
    from speculators_kimi import cli

    try:
        code: object = cli.main(["generate-hidden-states", *argv])
    except SystemExit as exited:  # upstream's known errors: run_cli
        code = exited.code
    return code, capsys.readouterr().err


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> tuple[Path, Path]:
    """Tiny Llama verifier and its prepare-data dataset directory (no states)."""
    out = tmp_path_factory.mktemp("llama")
    spec = TinyVerifierSpec(num_samples=24)
    verifier = build_verifier(spec, out / "verifier")
    data = build_dataset(spec, verifier, out / "data")
    return verifier, data


@pytest.fixture(scope="module")
def kimi(tmp_path_factory) -> Path:
    return build_kimi_tiny(tmp_path_factory.mktemp("kimi") / "verifier")


def _check_convention(decoder, full, n_layers: int) -> None:
    """``decoder``: what datagen loads; ``full``: the verifier with its head."""
    ids = torch.randint(0, full.config.vocab_size, (2, 17))
    layer_ids = [0, 2, n_layers // 2, n_layers]
    hs, _ = capture_hidden_states(decoder, ids, layer_ids)
    assert hs.shape == (2, 17, len(layer_ids) + 1, full.config.hidden_size)
    # A *ForCausalLM captures the same states and returns its logits.
    hs_full, logits = capture_hidden_states(full, ids, layer_ids, return_logits=True)
    torch.testing.assert_close(hs_full, hs)
    last = hs[:, :, -1]
    # The last entry is the final hidden state before the norm ...
    torch.testing.assert_close(full.lm_head(full.model.norm(last)), logits)
    # ... id num_layers is the output of the last layer (the same tensor) ...
    torch.testing.assert_close(hs[:, :, -2], last)
    # ... and id i < num_layers is the residual stream entering layer i.
    ref = full(ids, output_hidden_states=True).hidden_states
    for k, i in enumerate(layer_ids[:-1]):
        torch.testing.assert_close(hs[:, :, k], ref[i])
    torch.testing.assert_close(hs[:, :, 0], full.model.embed_tokens(ids))
    with pytest.raises(TypeError, match="no output head"):
        capture_hidden_states(decoder, ids, layer_ids, return_logits=True)


def test_convention_flat_llama(llama):
    verifier, _ = llama
    model, cfg, prefix = load_text_verifier(verifier, dtype=torch.float32)
    assert isinstance(model, LlamaModel)  # the decoder only: no output head
    assert prefix == "model"
    ref = LlamaForCausalLM.from_pretrained(verifier, dtype=torch.float32)
    assert model.state_dict().keys() == ref.model.state_dict().keys()
    for k, v in ref.model.state_dict().items():
        assert torch.equal(model.state_dict()[k], v), k
    _check_convention(model, ref, cfg.num_hidden_layers)


def test_convention_kimi_shaped(kimi):
    model, cfg, prefix = load_text_verifier(kimi, dtype=torch.float32)
    assert isinstance(model, DeepseekV3Model)
    assert prefix == DECODER_PREFIX == "language_model.model"
    assert cfg.hidden_size == KimiTinySpec().hidden_size
    assert cfg.first_k_dense_replace < cfg.num_hidden_layers  # MoE layers present
    ckpt = load_file(kimi / "model.safetensors")
    assert any(k.startswith("vision_tower.") for k in ckpt)
    for k, v in model.state_dict().items():
        assert torch.equal(v, ckpt[f"{prefix}.{k}"]), k
    full = DeepseekV3ForCausalLM(cfg).eval()
    full.load_state_dict(
        {k: ckpt[TEXT_PREFIX + k] for k in full.state_dict()}, strict=True
    )
    _check_convention(model, full, cfg.num_hidden_layers)


def test_default_layer_ids_follow_upstream(kimi, llama):
    assert default_target_layer_ids(kimi) == [2, 4, 5]
    assert default_target_layer_ids(llama[0], [1, 3, 8]) == [1, 3, 8]
    with pytest.raises(ValueError, match="distinct and within"):
        default_target_layer_ids(llama[0], [1, 9])


def _two_decoders(kimi: Path, out: Path) -> Path:
    """The Kimi checkpoint plus a second decoder and head of the same shapes."""
    out.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (out / name).write_bytes((kimi / name).read_bytes())
    tensors = load_file(kimi / "model.safetensors")
    gen = torch.Generator().manual_seed(5)
    for key in [k for k in tensors if k.startswith(TEXT_PREFIX)]:
        twin = "draft_model." + key[len(TEXT_PREFIX) :]
        tensors[twin] = torch.randn(tensors[key].shape, generator=gen)
    write_checkpoint(out, tensors)
    return out


@pytest.mark.slow
def test_decoder_is_the_one_training_resolves(kimi, tmp_path):
    """Two decoders fit: the trainer's error, one line; the trainer's flag chooses."""
    from speculators.utils.verifier_weights import resolve_verifier_weights

    both = _two_decoders(kimi, tmp_path / "both")
    with pytest.raises(VerifierWeightsError, match="Ambiguous verifier decoder"):
        resolve_verifier_weights(str(both))
    data = rows_dataset(tmp_path / "data", [[2, 5, 9, 11, 40, 3], [2, 8, 3]])
    proc = run(
        [*CLI, "--verifier", str(both), "--data-path", str(data), "--no-progress"],
        check=False,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "error: VerifierWeightsError: Ambiguous verifier decoder" in proc.stderr
    assert "--verifier-weight-prefix" in proc.stderr

    model, _, _ = load_text_verifier(kimi, dtype=torch.float32)
    for prefix, same in ((DECODER_PREFIX, True), ("draft_model.model", False)):
        out = tmp_path / prefix
        _run_cli(
            both, data, out, "--dtype", "float32", "--verifier-weight-prefix", prefix
        )
        got = load_file(out / "hs_0.safetensors")
        with safe_open(str(out / "hs_0.safetensors"), framework="pt") as f:
            meta = json.loads(f.metadata()[PROVENANCE_KEY])
        assert meta["verifier_prefix"] == prefix
        want, _ = capture_hidden_states(model, got["token_ids"][None], [2, 4, 5])
        close = torch.allclose(got["hidden_states"], want[0], atol=2e-5, rtol=1e-4)
        assert close is same, prefix


def test_plan_batches_is_by_length_and_bounded():
    lengths = [5, 30, 7, 30, 12, 6]
    batches = plan_batches(lengths, batch_size=2, max_batch_tokens=40)
    assert sorted(i for b in batches for i in b) == list(range(6))
    for b in batches:
        assert len(b) <= 2
        assert max(lengths[i] for i in b) * len(b) <= 40 or len(b) == 1
    assert batches[0] == [1]  # 30 * 2 > 40


def _snapshot(hs_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(hs_dir.iterdir())}


def _run_cli(verifier: Path, data: Path, out: Path, *extra: str):
    return run(
        [
            *CLI,
            "--verifier",
            str(verifier),
            "--data-path",
            str(data),
            "--output-dir",
            str(out),
            "--no-progress",
            *extra,
        ],
        timeout=600,
    )


@pytest.mark.slow
def test_cli_output_is_upstream_format_and_resume_is_byte_identical(llama, tmp_path):
    verifier, data = llama
    ref_dir = tmp_path / "ref"
    proc = _run_cli(verifier, data, ref_dir, "--batch-size", "4")
    assert "24 written" in proc.stdout
    ref = _snapshot(ref_dir)
    assert sorted(ref) == sorted(f"hs_{i}.safetensors" for i in range(24))

    # Upstream's trainer reads these files unchanged.
    from hs_connectors import FileTransfer
    from speculators.train.data import ArrowDataset

    ds = ArrowDataset(
        max_len=512,
        datapath=str(data),
        transfer=FileTransfer(ref_dir),
        on_missing="raise",
    )
    n_layers = default_target_layer_ids(verifier)
    sample = ds[3]
    assert not hasattr(sample, "reason"), sample
    assert sample["hidden_states"].shape[1] == len(n_layers) * 64
    assert sample["hidden_states"].dtype == torch.bfloat16

    # Interrupted run: Ctrl-C (SIGINT) once the first files are on disk.
    part = tmp_path / "part"
    cmd = [
        *CLI,
        "--verifier",
        str(verifier),
        "--data-path",
        str(data),
        "--output-dir",
        str(part),
        "--no-progress",
        "--batch-size",
        "4",
    ]
    proc2 = subprocess.Popen(
        cmd, start_new_session=True, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc2.poll() is None:
        if part.is_dir() and any(part.glob("hs_*.safetensors")):
            os.killpg(proc2.pid, signal.SIGINT)
            break
        time.sleep(0.005)
    _, stopped = proc2.communicate(timeout=120)
    written = sorted(part.glob("hs_*.safetensors"))
    assert written, "the interrupted run wrote nothing"
    if proc2.returncode != 0:  # stopped before the end: one line, no traceback
        assert proc2.returncode == 130, stopped
        assert "interrupted: generate-hidden-states stopped" in stopped
        assert "Traceback" not in stopped, stopped
    # Damage what survived: a truncated file, a stale temp file, a file with
    # fewer rows of states than tokens (valid safetensors), and a missing one.
    names = sorted(ref)
    (part / names[0]).write_bytes(ref[names[0]][:100])
    (part / f".{names[1]}.tmp999").write_bytes(b"junk")
    bad = load_file(ref_dir / names[2])
    bad["hidden_states"] = bad["hidden_states"][1:].contiguous()
    from safetensors.torch import save_file

    save_file(bad, str(part / names[2]))
    (part / names[3]).unlink(missing_ok=True)

    proc3 = _run_cli(verifier, data, part, "--batch-size", "4")
    assert "written" in proc3.stdout
    assert _snapshot(part) == ref

    # A complete directory is left alone.
    before = {p.name: p.stat().st_mtime_ns for p in part.iterdir()}
    proc4 = _run_cli(verifier, data, part, "--batch-size", "4")
    assert "0 written, 24 already complete" in proc4.stdout
    assert {p.name: p.stat().st_mtime_ns for p in part.iterdir()} == before
    with safe_open(str(part / names[5]), framework="pt") as f:
        meta = f.metadata()
    # One entry: safetensors writes the map in hash order, so two would make the
    # bytes differ between runs.
    assert set(meta) == {PROVENANCE_KEY}
    assert json.loads(meta[PROVENANCE_KEY])["target_layer_ids"] == n_layers

    # Data-parallel under torchrun (2 gloo ranks on CPU), resuming a directory
    # where files of both ranks' shares are missing: the same bytes, one bar.
    dp = tmp_path / "dp"
    shutil.copytree(ref_dir, dp)
    for name in names[::2]:
        (dp / name).unlink()
    logs = tmp_path / "logs"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node"]
    torchrun += ["2", "--log-dir", str(logs), "--redirects", "3"]
    cmd_dp = [*torchrun, "-m", "speculators_kimi.datagen", "--verifier"]
    cmd_dp += [str(verifier), "--data-path", str(data), "--output-dir", str(dp)]
    cmd_dp += ["--batch-size", "4"]
    run(cmd_dp, timeout=600)
    assert _snapshot(dp) == ref
    out = {int(f.parent.name): f.read_text() for f in logs.rglob("stdout.log")}
    err = {int(f.parent.name): f.read_text() for f in logs.rglob("stderr.log")}
    assert "12 written by 2 ranks, 12 already complete" in out[0]
    assert out[1] == ""
    assert "24/24" in err[0]
    assert "hidden states" not in err[1]


@pytest.mark.parametrize(
    ("world", "count", "shares", "steps"),
    [
        (1, 5, [[0, 1, 2, 3, 4]], 5),
        (2, 5, [[0, 2, 4], [1, 3]], 3),
        (3, 2, [[0], [1], []], 1),
    ],
)
def test_ranks_take_disjoint_shares_in_lockstep(world, count, shares, steps):
    got = [Ranks(rank=r, world_size=world).share(range(count)) for r in range(world)]
    assert got == shares
    assert Ranks(rank=0, world_size=world).steps(count) == steps
    assert sorted(i for share in got for i in share) == list(range(count))


def test_context_length_error_names_the_sample(llama, tmp_path, capsys):
    verifier, _ = llama
    short = tmp_path / "verifier"
    short.mkdir()
    for p in verifier.iterdir():
        (short / p.name).write_bytes(p.read_bytes())
    cfg = json.loads((short / "config.json").read_text())
    cfg["max_position_embeddings"] = 16
    (short / "config.json").write_text(json.dumps(cfg))
    rows = [list(range(10, 20)), list(range(10, 40)), list(range(10, 15))]
    data = rows_dataset(tmp_path / "data", rows)
    code, err = _in_process(
        ["--verifier", str(short), "--data-path", str(data)], capsys
    )
    assert code == 1
    assert "sample 1 has 30 tokens" in err
    assert "max_position_embeddings=16" in err
    assert not any((data / "hidden_states").glob("hs_*"))


def test_a_token_past_the_verifiers_vocabulary_is_refused_before_loading(
    llama, tmp_path, capsys
):
    """Data prepared with another tokenizer: torch.embedding's IndexError after
    the model loaded, now one line naming the sample and the id."""
    from speculators_kimi import cli

    verifier, _ = llama
    vocab = json.loads((verifier / "config.json").read_text())["vocab_size"]
    data = rows_dataset(tmp_path / "data", [[1, 2, 3], [4, vocab + 5, 6]])
    argv = ["generate-hidden-states", "--verifier", str(verifier)]
    assert cli.main([*argv, "--data-path", str(data)]) == 1
    err = capsys.readouterr().err
    assert f"sample 1 has token id {vocab + 5}, past the verifier's vocabulary" in err
    assert not any((data / "hidden_states").glob("hs_*"))


def test_rows_of_another_tokenizer_are_refused_before_loading(llama, tmp_path, capsys):
    """Rows of the Llama's tokenizer, states asked of a verifier whose tokenizer
    numbers words otherwise: only the data's tokenizer record tells."""
    from speculators_kimi import cli

    llama_verifier, data = llama
    other = reordered_words(llama_verifier, tmp_path / "other")
    out = tmp_path / "hs"
    argv = ["generate-hidden-states", "--verifier", str(other), "--data-path"]
    with pytest.raises(SystemExit) as exited:  # upstream's known error: run_cli
        cli.main([*argv, str(data), "--output-dir", str(out)])
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"{data} was prepared with the tokenizer of {llama_verifier}" in err
    assert f"speculators prepare-data --model {other}" in err
    assert not out.exists()
    # The verifier it was prepared with passes the same check.
    from speculators.train.data_checks import check_data_tokenizer

    check_data_tokenizer(data, str(llama_verifier))


def test_missing_weights_is_a_clear_error(kimi, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_bytes((kimi / "config.json").read_bytes())
    tensors = load_file(kimi / "model.safetensors")
    del tensors[TEXT_PREFIX + "model.layers.3.mlp.gate.weight"]
    write_checkpoint(broken, tensors)
    with pytest.raises(
        VerifierWeightsError,
        match=r"'language_model\.model' .*: 1 text-model weight\(s\) not loaded .*"
        r"layers\.3\.mlp\.gate\.weight",
    ):
        load_text_verifier(broken)


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_a_broken_layer_shard_is_one_line(kimi, tmp_path, monkeypatch, capsys, damage):
    """A layer shard of the weight map (no tensor the resolver reads) that is
    missing or cut short: one line naming it and the fix, before any output."""
    from speculators_kimi import cli

    verifier = tmp_path / "verifier"
    verifier.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (verifier / name).write_bytes((kimi / name).read_bytes())
    tensors = load_file(kimi / "model.safetensors")
    layers = sorted(k for k in tensors if ".layers." in k)
    write_checkpoint(verifier, tensors, shards=[layers, []])
    shard = verifier / "model-00001-of-00002.safetensors"
    size = shard.stat().st_size
    if damage == "missing":
        shard.unlink()
        state = "missing"
    else:
        shard.write_bytes(shard.read_bytes()[:-16])
        state = f"truncated ({size - 16} of {size} bytes)"
    data = rows_dataset(tmp_path / "data", [[2, 5, 9, 11], [2, 8, 3]])
    out = tmp_path / "hs"
    monkeypatch.delenv("SPECULATORS_TRACEBACK", raising=False)
    argv = ["generate-hidden-states", "--verifier", str(verifier)]
    argv += ["--data-path", str(data), "--output-dir", str(out), "--no-progress"]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-2] == (
        f"error: Shard {shard} is {state}; the weight map puts {len(layers)} "
        f"tensors there ({', '.join(layers[:3])}, ...); re-download the "
        "checkpoint (or this shard), then rerun (`speculators-kimi doctor "
        f"{verifier}` checks every shard)"
    )
    assert "Traceback" not in err
    assert not out.exists()
    # The other commands that load the verifier (evaluate, the demo) refuse it too.
    with pytest.raises(BrokenShardError, match=f"Shard {shard} is {re.escape(state)}"):
        load_text_verifier(verifier)


def test_generate_in_process_matches_model(kimi, tmp_path):
    """Hidden states written for a Kimi-shaped verifier equal an unbatched run."""
    rows = [[2, 5, 9, 11, 40, 3], [2, 7, 7, 100, 200, 300, 400, 3, 5], [2, 8, 3]]
    data = rows_dataset(tmp_path / "data", rows)
    res = generate_hidden_states(
        kimi, data, dtype="float32", device="cpu", batch_size=3, progress=False
    )
    assert res.written == 3
    assert res.target_layer_ids == [2, 4, 5]
    model, _, _ = load_text_verifier(kimi, dtype=torch.float32)
    for i, ids in enumerate(rows):
        got = load_file(data / "hidden_states" / f"hs_{i}.safetensors")
        assert got["token_ids"].tolist() == ids
        want, _ = capture_hidden_states(model, torch.tensor([ids]), [2, 4, 5])
        torch.testing.assert_close(got["hidden_states"], want[0], atol=2e-5, rtol=1e-4)


def test_missing_verifier_is_one_line(tmp_path, capsys):
    missing = tmp_path / "no-such-verifier"
    argv = ["--verifier", str(missing), "--data-path", str(tmp_path)]
    code, err = _in_process(argv, capsys)
    assert code == 1
    assert "Traceback" not in err
    assert f"{missing}: the local path does not exist" in err


def test_files_of_another_verifier_are_redone_or_refused(kimi, tmp_path):
    """Verifier B is A fine-tuned (one layer changed, same shapes): A's files in
    the output directory are not B's, whatever their shapes say."""

    rows = [[2, 5, 9, 11], [2, 7, 7, 100, 200], [2, 8, 3]]
    data = rows_dataset(tmp_path / "data", rows)
    out = data / "hidden_states"
    generate_hidden_states(kimi, data, dtype="float32", device="cpu", progress=False)
    other = tmp_path / "kimi-b"
    shutil.copytree(kimi, other)
    tensors = load_file(other / "model.safetensors")
    tensors[TEXT_PREFIX + "model.layers.1.self_attn.o_proj.weight"] += 0.5
    write_checkpoint(other, tensors)
    mine = _snapshot(out)

    with pytest.raises(OtherVerifierError) as raised:
        generate_hidden_states(
            other, data, dtype="float32", progress=False, on_mismatch="error"
        )
    assert f"3 of 3 files in {out} (the first: hs_0.safetensors)" in str(raised.value)
    assert str(other) in str(raised.value)
    assert _snapshot(out) == mine

    res = generate_hidden_states(other, data, dtype="float32", progress=False)
    assert (res.written, res.skipped, res.other_verifier) == (3, 0, 3)
    made_by = read_provenance(out / "hs_1.safetensors")
    assert made_by["verifier"] == str(other)
    # Each file is B's now: a rerun with B has nothing to do.
    again = generate_hidden_states(other, data, dtype="float32", progress=False)
    assert (again.written, again.skipped) == (0, 3)
    assert made_by["target_layer_ids"] == res.target_layer_ids


def test_files_made_with_other_flags_are_kept_unless_overwritten(kimi, tmp_path):
    """A rerun that forgot --target-layer-ids or --dtype would replace the work
    it meant to resume: refused before loading, naming both; --overwrite redoes
    them."""
    data = rows_dataset(tmp_path / "data", [[2, 5, 9, 11], [2, 8, 3]])
    out = data / "hidden_states"
    first = {"dtype": "float32", "device": "cpu", "progress": False}
    generate_hidden_states(kimi, data, target_layer_ids=[1, 2, 3], **first)
    mine = _snapshot(out)
    for flags in ({"dtype": "float32"}, {"target_layer_ids": [1, 2, 3]}):
        with pytest.raises(OtherSettingsError) as raised:
            generate_hidden_states(kimi, data, progress=False, **flags)
        message = str(raised.value)
        assert message.startswith(f"2 of 2 files in {out} (the first: hs_0")
        assert "--target-layer-ids 1 2 3 --dtype float32, this run asks" in message
        assert _snapshot(out) == mine
    res = generate_hidden_states(kimi, data, overwrite=True, progress=False)
    assert (res.written, res.skipped) == (2, 0)
    assert read_provenance(out / "hs_0.safetensors")["target_layer_ids"] == [2, 4, 5]


def test_files_of_another_dataset_are_kept_unless_overwritten(kimi, tmp_path):
    """--output-dir pointing at another dataset's states would replace hours of
    its work: refused before loading; in a dataset's own folder, files of other
    tokens are its earlier preparation's and are redone."""
    first = {"dtype": "float32", "device": "cpu", "progress": False}
    data_a = rows_dataset(tmp_path / "a", [[2, 5, 9, 11], [2, 8, 3]])
    generate_hidden_states(kimi, data_a, **first)
    theirs = data_a / "hidden_states"
    mine = _snapshot(theirs)
    shutil.copytree(theirs, tmp_path / "a_states")
    data_b = rows_dataset(tmp_path / "b", [[2, 5, 9, 11], [2, 7, 7, 3]])
    with pytest.raises(OtherDataError) as raised:
        generate_hidden_states(kimi, data_b, output_dir=theirs, **first)
    message = str(raised.value)
    assert message.startswith(f"1 of 2 files in {theirs} (the first: hs_1")
    assert f"other tokens than {data_b}'s rows" in message
    assert f"--output-dir (default: {data_b / 'hidden_states'})" in message
    assert _snapshot(theirs) == mine
    res = generate_hidden_states(
        kimi, data_b, output_dir=theirs, overwrite=True, **first
    )
    assert res.written == 2
    # The same dataset prepared again, its states beside it: redone, no flag.
    shutil.copytree(tmp_path / "a_states", data_b / "hidden_states")
    res = generate_hidden_states(kimi, data_b, **first)
    assert (res.written, res.skipped, res.other_tokens) == (1, 1, 1)


def test_an_output_dir_that_is_a_file_is_one_line(llama, tmp_path, capsys):
    from speculators_kimi import cli

    verifier, data = llama
    occupied = tmp_path / "taken"
    occupied.write_text("the user's file\n")
    argv = ["generate-hidden-states", "--verifier", str(verifier)]
    argv += ["--data-path", str(data), "--output-dir", str(occupied / "hs")]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert f"--output-dir {occupied / 'hs'}: {occupied} is a file" in err
    assert occupied.read_text() == "the user's file\n"


def test_an_output_dir_without_permission_is_one_line(llama, capsys):
    """A directory the process may not create (``/sys`` refuses even root)."""
    from speculators_kimi import cli

    verifier, data = llama
    denied = Path("/sys/speculators-kimi-test/hs")
    try:
        denied.mkdir(parents=True)
    except PermissionError:
        pass
    else:  # pragma: no cover - a writable /sys: nothing to refuse here
        denied.rmdir()
        pytest.skip("/sys is writable on this machine")
    argv = ["generate-hidden-states", "--verifier", str(verifier)]
    argv += ["--data-path", str(data), "--output-dir", str(denied)]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[-2] == (
        f"error: --output-dir {denied}: no permission to write "
        f"{denied.parent}; choose a directory you can write, or fix its permissions"
    )


def test_every_flag_reaches_the_options():
    """Each ``generate-hidden-states`` flag is read into its options: a flag
    added to the parser but not to ``options_from_args`` fails here."""
    from speculators_kimi.datagen.cli import add_arguments, options_from_args

    unread, options = unread_flags(
        add_arguments, options_from_args, no_progress=True, max_memory=None
    )
    assert unread == []
    assert options.progress is False
