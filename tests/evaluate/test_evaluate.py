"""`speculators-kimi evaluate`: EAGLE-3 speculative decoding with transformers.

On the demo's tiny Kimi-K2.5-shaped verifier (real DeepSeek-V3 MLA + MoE classes)
and drafts that upstream's `speculators train` wrote.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, cast

import pytest
import torch
from datasets import load_from_disk
from helpers import BIN, reordered_words, run, unread_flags
from safetensors.torch import load_file, save_file
from speculators.models.attention_backends import get_backend
from transformers import DynamicCache

from speculators_kimi import cli
from speculators_kimi.datagen import generate_hidden_states
from speculators_kimi.demo import DemoSettings, train_argv
from speculators_kimi.evaluate import (
    DraftRunner,
    dataset_prompts,
    load_draft,
    load_session,
)
from speculators_kimi.evaluate.decode import _verify
from speculators_kimi.evaluate.session import embedding_warning
from speculators_kimi.verifier.loading import Placement, parse_max_memory


def _paths(report: dict) -> tuple[Path, Path, Path]:
    return Path(report["verifier"]), Path(report["data"]), Path(report["checkpoint"])


def test_demo_acceptance_trained_vs_untrained(trained_demo):
    al = trained_demo["acceptance"]
    trained, untrained, sampled = al["trained"], al["untrained"], al["trained_t1"]
    assert trained["num_speculative_tokens"] == 3
    assert trained["num_prompts"] == untrained["num_prompts"] >= 8
    # Training bought acceptance: a clear margin over the same draft untrained.
    assert untrained["mean_acceptance_length"] < 1.1, untrained
    assert trained["mean_acceptance_length"] > untrained["mean_acceptance_length"] + 0.3
    assert trained["acceptance_rate_per_position"][0] > 0.25
    rates = trained["acceptance_rate_per_position"]
    assert rates == sorted(rates, reverse=True)  # position k needs k-1 accepted
    # Greedy speculative decoding is lossless on every prompt, for both drafts.
    assert trained["lossless"] is True and trained["mismatched_prompts"] == []
    assert untrained["lossless"] is True
    # Tokens per verifier forward: generated = rounds' emitted tokens (+ prefill).
    assert trained["verifier_forwards"] < untrained["verifier_forwards"]
    # T > 0 runs (rejection sampling) and reports its acceptance.
    assert sampled["lossless"] is None and sampled["temperature"] == 1.0
    assert sampled["mean_acceptance_length"] > 1.0
    assert len(sampled["acceptance_rate_per_position"]) == 3


def test_incremental_steps_equal_the_trainers_forward(trained_demo):
    """The cached, step-by-step draft computes what the trainer's TTT forward
    computes: step 0 over every position, and a chained step 1 fed the ground
    truth token (teacher forcing) after a prefix."""
    verifier_dir, data, ckpt = _paths(trained_demo)
    draft = load_draft(ckpt, torch.float32)
    session = load_session(ckpt, verifier_dir, dtype="float32", device="cpu")
    from datasets import load_from_disk

    rows = load_from_disk(str(data)).with_format(None)["input_ids"]
    ids = [int(t) for t in max(rows, key=len)[:40]]
    assert len(ids) == 40
    _, aux = session.verifier.forward(ids, DynamicCache())

    # The trainer's forward with the attention the runner decodes with.
    draft.config.transformer_layer_config._attn_implementation = "sdpa"
    draft._attn_backend = get_backend("sdpa")
    n = len(ids) - 1
    # The demo's draft layer is a sliding-attention layer (window 2048, longer
    # than these rows); a window of 6 checks that the runner applies it as
    # training does.
    assert draft.uses_sliding_window_attn
    for window in (draft.sliding_window, 6):
        draft.sliding_window = window
        with torch.no_grad():
            tokens = draft(
                hidden_states=aux[None, :-1],
                input_ids=torch.tensor([ids[1:]]),
                document_ids=torch.zeros(1, n, dtype=torch.long),
                ttt_steps=2,
            )
        runner = DraftRunner(draft, "cpu")
        _, logits = runner.step(torch.tensor(ids[1:]), runner.project(aux[:-1]), 1)
        assert torch.equal(logits.argmax(-1), tokens[0][0]), window
        # Chunked over the cache == all at once.
        runner.reset()
        _, a = runner.step(torch.tensor(ids[1:10]), runner.project(aux[:9]), 1)
        _, b = runner.step(torch.tensor(ids[10:]), runner.project(aux[9:-1]), 10)
        torch.testing.assert_close(torch.cat([a, b]), logits, atol=1e-5, rtol=1e-5)
        for j in (5, 12, n - 3):
            runner.reset()
            states, _ = runner.step(
                torch.tensor(ids[1 : j + 2]), runner.project(aux[: j + 1]), 1
            )
            _, step1 = runner.step(torch.tensor([ids[j + 2]]), states[-1:], j + 2)
            assert int(step1.argmax(-1)) == int(tokens[1][0, j]), (window, j)


def test_rejection_sampling_keeps_the_verifier_distribution():
    """Accept t ~ q with min(1, p/q), else resample max(p - q, 0): the emitted
    token is distributed as p, whatever the draft's q."""
    gen = torch.Generator().manual_seed(0)
    p_logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, 0.5], [0.0] * 5])
    p = torch.softmax(p_logits[0], -1)
    q = torch.tensor([0.05, 0.6, 0.3, 0.05, 0.0])
    counts = torch.zeros(5)
    draws = 20000
    for _ in range(draws):
        t = int(torch.multinomial(q, 1, generator=gen))
        m, nxt = _verify([t], [q], p_logits, 1.0, gen)
        counts[t if m == 1 else nxt] += 1
    assert (counts / draws - p).abs().max() < 0.015, (counts / draws, p)


def test_wrong_hidden_states_score_lower(trained_demo, tmp_path):
    """A datagen bug, hidden states one position late (token j gets state j-1),
    is caught: the draft trained on them validates fine (teacher forcing on the
    same wrong states) but its acceptance is clearly lower on the same prompts."""
    verifier_dir, data, ckpt = _paths(trained_demo)
    wrong = tmp_path / "data"
    shutil.copytree(data, wrong)
    for path in (wrong / "hidden_states").glob("hs_*.safetensors"):
        tensors = load_file(path)
        hs = tensors["hidden_states"]
        tensors["hidden_states"] = torch.cat([hs[:1], hs[:-1]]).contiguous()
        save_file(tensors, path)
    argv = train_argv(verifier_dir, wrong, tmp_path / "run", DemoSettings(epochs=3))
    run([str(BIN / "speculators"), "train", *argv])
    bad_ckpt = tmp_path / "run" / "checkpoints" / ckpt.name
    prompts = dataset_prompts(data)
    right = trained_demo["acceptance"]["trained"]
    session = load_session(bad_ckpt, verifier_dir, dtype="float32", device="cpu")
    bad = session.evaluate(prompts, num_speculative_tokens=3, max_new_tokens=32)
    assert bad.lossless
    assert bad.mean_acceptance_length < right["mean_acceptance_length"] - 0.2, (
        bad.mean_acceptance_length,
        right["mean_acceptance_length"],
    )


def test_offloaded_verifier_gives_identical_states_and_acceptance(
    trained_demo, tmp_path
):
    """`max_memory` small enough that accelerate offloads most decoder layers to
    disk: hidden states and acceptance are those of the unsharded run."""
    verifier_dir, data, ckpt = _paths(trained_demo)
    placement = Placement("auto", parse_max_memory("cpu=1MB"), str(tmp_path / "off"))
    session = load_session(
        ckpt, verifier_dir, dtype="float32", device="cpu", placement=placement
    )
    device_map = cast(dict[str, Any], session.verifier.decoder.hf_device_map)
    assert "disk" in set(device_map.values()), device_map

    out = tmp_path / "hs"
    res = generate_hidden_states(
        verifier_dir, data, output_dir=out, placement=placement, progress=False
    )
    assert res.written > 0
    for path in sorted(out.glob("hs_*.safetensors")):
        want = load_file(data / "hidden_states" / path.name)
        got = load_file(path)
        assert torch.equal(got["hidden_states"], want["hidden_states"]), path.name

    prompts = dataset_prompts(data)
    report = session.evaluate(prompts, num_speculative_tokens=3, max_new_tokens=32)
    unsharded = trained_demo["acceptance"]["trained"]
    for key in ("mean_acceptance_length", "acceptance_rate_per_position"):
        assert report.as_dict()[key] == unsharded[key], key
    assert report.num_generated_tokens == unsharded["num_generated_tokens"]
    assert report.lossless


def test_evaluate_command(trained_demo, tmp_path, capsys):
    verifier_dir, data, ckpt = _paths(trained_demo)
    report = tmp_path / "al.json"
    verifier = ["evaluate", "--verifier", str(verifier_dir)]
    base = [str(BIN / "speculators-kimi"), *verifier]
    # A run's checkpoints directory: its checkpoint_best is evaluated.
    proc = run(
        [
            *base,
            "--draft",
            str(ckpt.parent),
            "--data",
            str(data),
            "--num-prompts",
            "3",
            "-k",
            "2",
            "--max-new-tokens",
            "12",
            "--json",
            str(report),
        ]
    )
    assert (
        "mean acceptance length" in proc.stdout
        and "lossless                yes" in proc.stdout
    )
    got = json.loads(report.read_text())
    assert got["num_prompts"] == 3 and got["num_speculative_tokens"] == 2
    assert len(got["acceptance_rate_per_position"]) == 2
    assert got["num_generated_tokens"] <= 3 * 12
    assert got["lossless"] is True and got["wall_time_s"] > 0
    assert "evaluate" in proc.stderr  # the progress bar

    # A conversations JSONL, rendered with the verifier's chat template; the
    # second in ShareGPT's from/value turns, which prepare-data reads too.
    convs = tmp_path / "convs.jsonl"
    convs.write_text(
        json.dumps(
            {"messages": [{"role": "user", "content": "what color is the sky ?"}]}
        )
        + "\n"
        + json.dumps(
            {
                "conversations": [
                    {"from": "human", "value": "count from one to five ."},
                    {"from": "gpt", "value": "one two three four five ."},
                ]
            }
        )
        + "\n"
    )
    # The rest in this process: the console script's path is the run above.
    code = cli.main(
        [
            *verifier,
            *("--draft", str(ckpt), "--prompts", str(convs)),
            *("--json", str(report), "--temperature", "0.7", "--no-progress"),
        ]
    )
    got = json.loads(report.read_text())
    assert code == 0 and got["num_prompts"] == 2 and got["lossless"] is None
    capsys.readouterr()

    # Clear errors: a directory that is no checkpoint; a bad JSONL line.
    code = cli.main([*verifier, "--draft", str(tmp_path), "--data", str(data)])
    assert code == 1 and "no config.json" in capsys.readouterr().err
    convs.write_text('{"messages": []}\n')
    code = cli.main([*verifier, "--draft", str(ckpt), "--prompts", str(convs)])
    assert code != 0 and f"{convs}:1" in capsys.readouterr().err
    # A JSON array (over lines, or on one) names JSON Lines.
    turns = '{"messages": [{"role": "user", "content": "hi"}]}'
    for text in (f"[\n{turns}\n]\n", f"[{turns}]\n"):
        convs.write_text(text)
        code = cli.main([*verifier, "--draft", str(ckpt), "--prompts", str(convs)])
        err = capsys.readouterr().err
        assert code != 0 and "--prompts takes JSON Lines" in err, err


def test_a_moved_checkpoint_evaluates_with_the_given_verifier(trained_demo, tmp_path):
    verifier_dir, data, ckpt = _paths(trained_demo)
    moved = tmp_path / "ckpt"
    shutil.copytree(ckpt, moved)
    config = json.loads((moved / "config.json").read_text())
    config["speculators_config"]["verifier"]["name_or_path"] = str(tmp_path / "gone")
    (moved / "config.json").write_text(json.dumps(config))
    session = load_session(moved, verifier_dir, dtype="float32", device="cpu")
    report = session.evaluate(
        dataset_prompts(data), num_speculative_tokens=3, max_new_tokens=32
    )
    want = trained_demo["acceptance"]["trained"]
    assert report.mean_acceptance_length == want["mean_acceptance_length"]


def test_a_verifier_of_the_same_shapes_but_other_weights_is_warned_of(
    trained_demo, tmp_path
):
    """A fine-tune of the verifier passes the geometry check; the draft's saved
    (frozen) copy of its verifier's embedding tells them apart."""
    verifier_dir, _, ckpt = _paths(trained_demo)
    session = load_session(ckpt, verifier_dir, dtype="float32", device="cpu")
    assert embedding_warning(ckpt, session.draft, session.verifier) is None

    other = tmp_path / "fine-tuned"
    shutil.copytree(verifier_dir, other)
    for shard in other.glob("*.safetensors"):
        tensors = load_file(shard)
        for key in [k for k in tensors if k.endswith("embed_tokens.weight")]:
            tensors[key] = tensors[key] * 1.5
        save_file(tensors, shard, metadata={"format": "pt"})
    session = load_session(ckpt, other, dtype="float32", device="cpu")
    warning = embedding_warning(ckpt, session.draft, session.verifier)
    assert warning is not None
    assert warning.startswith(f"{ckpt}'s input embedding (its verifier's, frozen")
    assert f"trained for another verifier ({other})" not in warning
    assert f"({verifier_dir})" in warning


def test_data_of_another_tokenizer_is_refused_before_loading(
    trained_demo, tmp_path, capsys
):
    """Prompts of --data mean other text to a verifier of another tokenizer."""
    verifier_dir, data, ckpt = _paths(trained_demo)
    other = reordered_words(verifier_dir, tmp_path / "other")
    argv = ["evaluate", "--draft", str(ckpt), "--verifier", str(other)]
    with pytest.raises(SystemExit) as exited:  # upstream's known error: run_cli
        cli.main([*argv, "--data", str(data)])
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert f"{data} was prepared with the tokenizer of {verifier_dir}" in err
    assert "Traceback" not in err


def test_data_that_is_not_a_prepared_dataset_names_evaluates_flag(
    trained_demo, tmp_path, capsys
):
    """The shared dataset check names the flag of the command that called it."""
    verifier_dir, _, ckpt = _paths(trained_demo)
    (tmp_path / "rows").mkdir()
    argv = ["evaluate", "--draft", str(ckpt), "--verifier", str(verifier_dir)]
    with pytest.raises(SystemExit) as exited:
        cli.main([*argv, "--data", str(tmp_path / "rows")])
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert f"--data {tmp_path / 'rows'} is not a prepared dataset" in err
    assert "--data-path" not in err


def test_max_memory_parsing():
    assert parse_max_memory("0=70GiB, 1=70GiB,cpu=200GiB") == {
        0: "70GiB",
        1: "70GiB",
        "cpu": "200GiB",
    }
    with pytest.raises(ValueError, match="DEVICE=SIZE"):
        parse_max_memory("70GiB")


def test_a_draft_for_another_verifier_is_named_before_loading(tmp_path, capsys):
    """A draft of verifier A evaluated on B (wider) or on the Kimi-shaped one: one
    line naming both verifiers and what differs; no weights loaded, no report."""
    from transformers import AutoConfig

    from speculators_kimi.cli import main
    from speculators_kimi.tiny_verifier import (
        TinyVerifierSpec,
        build_kimi_tiny,
        build_verifier,
    )
    from speculators_kimi.tiny_verifier.draft import build_eagle3_draft

    a = build_verifier(TinyVerifierSpec(num_samples=2), tmp_path / "a")
    b = build_verifier(TinyVerifierSpec(num_samples=2, hidden_size=96), tmp_path / "b")
    kimi = build_kimi_tiny(tmp_path / "kimi")
    layer = AutoConfig.from_pretrained(a)
    layer.num_hidden_layers = 1
    draft = build_eagle3_draft(
        layer,
        draft_vocab_size=layer.vocab_size,
        ttt_steps=2,
        verifier_architecture="LlamaForCausalLM",
        std=0.02,
    )
    draft.config.speculators_config.verifier.name_or_path = str(a)
    ckpt = tmp_path / "draft"
    draft.save_pretrained(ckpt)
    prompts = tmp_path / "prompts.jsonl"
    turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]
    prompts.write_text(json.dumps({"conversations": turns}) + "\n")
    report = tmp_path / "report.json"

    def evaluate(verifier: Path) -> int:
        argv = ["evaluate", "--draft", str(ckpt), "--verifier", str(verifier)]
        argv += ["--prompts", str(prompts), "--json", str(report), "--no-progress"]
        return main([*argv, "--max-new-tokens", "2", "--trust-remote-code"])

    assert evaluate(b) == 1
    err = capsys.readouterr().err.strip().splitlines()[-2]
    assert err == (
        f"error: draft {ckpt} was trained for {a}, not for --verifier {b}: hidden "
        "size 64 (verifier's 96). Pass the verifier it was trained for, or a "
        "draft trained for this one."
    )
    assert evaluate(kimi) == 1
    err = capsys.readouterr().err.strip().splitlines()[-2]
    assert f"was trained for {a}, not for --verifier {kimi}: hidden size 64" in err
    assert "vocabulary" in err
    assert "--verifier-weight-prefix" not in err
    assert not report.exists()
    assert evaluate(a) == 0
    assert json.loads(report.read_text())["verifier"] == str(a)


def test_a_missing_draft_is_one_line_and_a_traceback_on_request(
    tmp_path, capsys, monkeypatch
):
    """A command's bad input (here ``--draft``) is reported by the command line
    as one line and exit 1; ``SPECULATORS_TRACEBACK=1`` raises it instead."""
    from speculators_kimi.cli import main
    from speculators_kimi.errors import MissingInputError
    from speculators_kimi.tiny_verifier import TinyVerifierSpec, build_verifier

    verifier = build_verifier(TinyVerifierSpec(num_samples=2), tmp_path / "v")
    missing = tmp_path / "no-draft"
    argv = ["evaluate", "--draft", str(missing), "--verifier", str(verifier)]
    argv += ["--prompts", str(tmp_path / "p.jsonl")]
    monkeypatch.delenv("SPECULATORS_TRACEBACK", raising=False)
    capsys.readouterr()  # the verifier's build
    assert main(argv) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"error: --draft {missing}: no config.json (nor checkpoint_best/config.json);"
        " point it at a checkpoint written by `speculators train`",
        "(set SPECULATORS_TRACEBACK=1 to see the traceback)",
    ]
    # A --verifier that is no directory was taken for a Hub id: a download's
    # OSError traceback.
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert main([*argv[:4], "nope", *argv[5:]]) == 1
    assert capsys.readouterr().err.splitlines()[0] == (
        "error: --verifier nope: no such directory; pass a local copy of the verifier"
    )
    monkeypatch.setenv("SPECULATORS_TRACEBACK", "1")
    with pytest.raises(MissingInputError):
        main(argv)


def test_a_bf16_draft_keeps_exact_rotary_tables(tiny_draft_checkpoint, tmp_path):
    """Loaded in bfloat16 (what ``--dtype auto`` gives on a GPU), the draft's
    rotary frequencies stay float32: its cos/sin at position 32k are the float32
    tables rounded once to bf16, as vLLM's cache holds them; casting the
    frequencies themselves (what ``model.to`` does) is off there."""
    ckpt = tiny_draft_checkpoint
    exact = load_draft(ckpt, torch.float32)
    half = load_draft(ckpt, torch.bfloat16)
    assert half.rotary_emb.inv_freq.dtype == torch.float32
    assert torch.equal(half.rotary_emb.inv_freq, exact.rotary_emb.inv_freq)
    assert next(half.parameters()).dtype == torch.bfloat16

    positions = torch.tensor([[0, 1, 4095, 32767]])
    x = torch.zeros(1, 4, 8, dtype=torch.bfloat16)
    cos, sin = half.rotary_emb(x, positions)
    want_cos, want_sin = exact.rotary_emb(x.float(), positions)
    assert torch.equal(cos, want_cos.to(torch.bfloat16))
    assert torch.equal(sin, want_sin.to(torch.bfloat16))

    rounded = load_draft(ckpt, torch.float32).to(torch.bfloat16)  # the old cast
    old_cos, _ = rounded.rotary_emb(x, positions)
    assert not torch.equal(old_cos[0, -1], cos[0, -1])

    # dtype None: as stored (what vllm_check/draft.py loads before upcasting).
    half.save_pretrained(tmp_path / "bf16")
    kept = load_draft(tmp_path / "bf16", None)
    assert next(kept.fc.parameters()).dtype == torch.bfloat16
    assert torch.equal(kept.fc.weight, half.fc.weight)
    assert kept.rotary_emb.inv_freq.dtype == torch.float32


def _evaluate(argv: list[str]) -> int:
    return cli.main(["evaluate", "--no-progress", "-k", "3", *argv])


def test_profile_context_buckets_and_the_epoch_to_ship(trained_demo, tmp_path, capsys):
    """On the demo's draft (trained on 256-token sequences): the profile written
    recomputes from its rows; prompts several times longer warn and accept less,
    bucket by bucket; and over a run whose lowest-loss epoch accepts worst (the
    first epoch, its draft layers zeroed, given the last epoch's validation
    metrics and the last the first's), the table picks by measured acceptance,
    and `export` ships its pick with the profile."""
    from speculators_kimi.evaluate import (
        RequestRecord,
        build_profile,
        check_profile,
        draft_lengths,
    )
    from speculators_kimi.evaluate.profile import draft_digest
    from speculators_kimi.export.draft import PROFILE_NAME

    verifier_dir, data, ckpt = _paths(trained_demo)
    run_dir = tmp_path / "checkpoints"
    shutil.copytree(ckpt.parent, run_dir, symlinks=True)
    epochs = sorted(int(p.name) for p in run_dir.iterdir() if p.name.isdigit())
    first, last = run_dir / str(epochs[0]), run_dir / str(epochs[-1])
    metrics = {p: (p / "val_metrics.json").read_bytes() for p in (first, last)}
    (first / "val_metrics.json").write_bytes(metrics[last])
    (last / "val_metrics.json").write_bytes(metrics[first])
    weights = load_file(first / "model.safetensors")
    zeroed = ("fc.weight", "_proj.weight")
    for name in [n for n in weights if n.endswith(zeroed)]:
        weights[name] = torch.zeros_like(weights[name])
    save_file(weights, first / "model.safetensors", metadata={"format": "pt"})
    # The demo's rows (one conversation each) are shorter than its total_seq_len
    # of 256, and positions restart at every row: the longest row is the bound.
    lengths = draft_lengths(last)
    trained = lengths.trained
    assert trained is not None and trained < 256, lengths
    assert "longest row" in lengths.trained_from
    common = ["--verifier", str(verifier_dir), "--data", str(data)]
    common += ["--num-prompts", "4", "--max-new-tokens", "16"]

    profile, short = tmp_path / "profile.json", tmp_path / "short.json"
    assert _evaluate(["--draft", str(last), *common, "--profile", str(profile),
                      "--json", str(short)]) == 0  # fmt: skip
    out = capsys.readouterr()
    assert "(marginal: share of steps accepting at least k" in out.out
    # Short prompts may pass the longest row, but only that is warned about.
    warned = [ln for ln in out.err.splitlines() if "warning" in ln.lower()]
    assert all(f"past the {trained} tokens" in ln for ln in warned), out.err
    report, written = json.loads(short.read_text()), json.loads(profile.read_text())
    check_profile(written)
    assert written["mean_accept_length"] == pytest.approx(
        report["mean_acceptance_length"], abs=1e-6
    )
    assert written["num_drafts"] == sum(len(r["accepted_per_step"])
                                        for r in written["requests"])  # fmt: skip
    assert written["marginal_accept_rates"] == pytest.approx(
        report["acceptance_rate_per_position"], abs=1e-6
    )

    long = tmp_path / "long.json"
    assert _evaluate(["--draft", str(last), *common, "--context-length", "900",
                      "--json", str(long)]) == 0  # fmt: skip
    err = capsys.readouterr().err
    assert f"past the {trained} tokens the draft was trained on" in err
    # The demo's held-out rows hold fewer than 900 tokens: said, in the report too.
    rows = load_from_disk(str(data)).with_format(None)
    start = int(len(rows) * DemoSettings().train_data_ratio)
    masks = [rows[i]["loss_mask"] for i in range(start, len(rows))]
    firsts = [next((j for j, v in enumerate(m) if v), 0) for m in masks]
    prompted = [i for i, first in enumerate(firsts, start) if first > 0]
    tokens = sum(len(rows[i]["input_ids"]) for i in prompted)
    assert tokens < 900
    longest = re.search(r"prompts of up to (\d+) tokens", err)
    assert longest, err
    said = (
        f"--context-length 900: the 'val' split's {len(prompted)} conversations "
        f"hold {tokens} tokens in all, so the longest prompt has {longest[1]}; "
        "acceptance past that is not measured: use --split all"
    )
    assert f"warning: {said}" in err.splitlines(), err
    assert said in json.loads(long.read_text())["warnings"]
    far = json.loads(long.read_text())["acceptance_by_context"]
    near = report["acceptance_by_context"]
    assert all(b["context_to"] <= 256 for b in near)
    assert far and all(b["context_from"] >= 256 for b in far)
    # The drop: every long-context bucket accepts less than every short one.
    assert max(b["mean_acceptance_length"] for b in far) < min(
        b["mean_acceptance_length"] for b in near
    ), (near, far)

    table_file, picked = tmp_path / "table.json", tmp_path / "picked.json"
    each_epoch = ["--each-epoch", "--json", str(table_file), "--profile", str(picked)]
    assert _evaluate(["--draft", str(run_dir), *common, *each_epoch]) == 0
    table = json.loads(table_file.read_text())
    rows = {row["epoch"]: row for row in table["epochs"]}
    assert sorted(rows) == epochs
    best = max(rows.values(), key=lambda r: r["mean_acceptance_length"])
    assert table["best"] == best and best["epoch"] != table["lowest_val_loss_epoch"]
    assert table["lowest_val_loss_epoch"] == epochs[0]
    assert rows[epochs[-1]]["mean_acceptance_length"] == pytest.approx(
        report["mean_acceptance_length"]
    )  # the same prompts, the same figure as evaluated alone

    out_dir = tmp_path / "export"
    code = cli.main(["export", str(table_file), "--out", str(out_dir),
                     "--verifier-id", "org/v", "--profile", str(picked)])  # fmt: skip
    assert code == 0 and f"the pick of {table_file}" in capsys.readouterr().out
    shipped = json.loads((out_dir / PROFILE_NAME).read_text())
    assert shipped == json.loads(picked.read_text())
    measured = shipped["measurement_conditions"]["draft_weights_sha256"]
    assert measured == draft_digest(Path(best["checkpoint"]))
    assert written["method"] == "eagle3"
    # The last epoch's profile does not describe the first epoch's draft (the
    # same method and K): it was shipped with it.
    exporting = ["export", str(first), "--out", str(tmp_path / "first")]
    assert (
        cli.main([*exporting, "--verifier-id", "org/v", "--profile", str(profile)]) == 1
    )
    assert "measured on another draft than" in capsys.readouterr().err
    # A profile of another draft, or of another K, does not describe the export.
    k = written["num_speculative_tokens"]
    records = [RequestRecord(**row) for row in written["requests"]]
    for method, at_k in (("dspark", k), ("eagle3", k + 1)):
        other = tmp_path / f"{method}-{at_k}.json"
        other.write_text(json.dumps(
            build_profile(records, at_k, written["sampling"], method=method)
        ))  # fmt: skip
        exporting = ["export", str(last), "--out", str(tmp_path / method)]
        code = cli.main([*exporting, "--verifier-id", "org/v", "--profile", str(other)])
        err = capsys.readouterr().err
        assert code != 0, err
        assert f"measured on {method} at num_speculative_tokens {at_k}; " in err
        assert f"this export serves eagle3 at {k}. Measure this checkpoint" in err
        # the fix writes a new profile beside the other one, not over it
        assert f"--profile {tmp_path / f'{method}-{at_k}-new.json'}" in err


def test_every_flag_reaches_the_options():
    """Each ``evaluate`` flag but ``--json`` (the report's, read where it is
    written) is read into its options: a flag added to the parser but not to
    ``options_from_args`` fails here."""
    from speculators_kimi.evaluate.cli import add_arguments, options_from_args

    unread, options = unread_flags(add_arguments, options_from_args, no_progress=True)
    assert unread == ["json"]
    assert options.progress is False


@pytest.mark.parametrize(
    ("flag", "value", "why"),
    [
        ("-k", "0", "0 is not a positive integer"),
        ("--max-new-tokens", "-2", "-2 is not a positive integer"),
        ("--num-prompts", "0", "0 is not a positive integer"),
        ("--context-length", "-5", "-5 is not a positive integer"),
        ("--temperature", "-1", "-1 is not a number >= 0"),
        ("--profile", ".", ". is a directory; name a file"),
        ("--json", ".", ". is a directory; name a file"),
    ],
)
def test_flag_values_no_run_can_use_are_refused_by_the_parser(flag, value, why, capsys):
    """Refused in one usage line before the models load (they failed after the
    decode, or ran with a meaningless value)."""
    import argparse

    from speculators_kimi.evaluate.cli import add_arguments

    parser = argparse.ArgumentParser(prog="evaluate")
    add_arguments(parser)
    base = ["--draft", "d", "--verifier", "v", "--data", "x"]
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args([*base, flag, value])
    assert exit_info.value.code == 2
    assert why in capsys.readouterr().err
