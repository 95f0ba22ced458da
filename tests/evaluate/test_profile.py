"""The acceptance profile (`evaluate --profile`), acceptance by context length, the
held-out split and the per-epoch pick, on hand-checked accept patterns and files (no
model: the arithmetic)."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from speculators_kimi.evaluate.context import (
    DraftLengths,
    acceptance_by_context,
    draft_lengths,
    length_warnings,
)
from speculators_kimi.evaluate.epochs import (
    EpochRow,
    best_epoch,
    epoch_table,
    table_choice,
)
from speculators_kimi.evaluate.profile import (
    RequestRecord,
    build_profile,
    check_profile,
)

SAMPLING = {"temperature": 0.0, "seed": 0, "max_new_tokens": 8}


def _records() -> list[RequestRecord]:
    # K = 3; steps accept 3, 0, 1 | 2, 3, 1: 10 tokens over 6 steps.
    return [
        RequestRecord("a", 40, 7, [3, 0, 1], [41, 45, 46]),
        RequestRecord("b", 100, 9, [2, 3, 1], [101, 104, 108]),
    ]


def test_known_accept_pattern_gives_known_rates():
    profile = build_profile(_records(), 3, SAMPLING, method="eagle3")
    # At least 1: 5 of 6 steps; at least 2: 3; at least 3: 2.
    assert profile["num_drafts"] == 6 and profile["num_draft_tokens"] == 18
    assert profile["num_accepted_tokens"] == 10
    assert profile["num_accepted_tokens_per_pos"] == [5, 3, 2]
    assert profile["marginal_accept_rates"] == pytest.approx(
        [5 / 6, 3 / 6, 2 / 6], abs=1e-6
    )
    assert profile["conditional_accept_rates"] == pytest.approx(
        [5 / 6, 3 / 5, 2 / 3], abs=1e-6
    )
    assert profile["mean_accept_length"] == pytest.approx(1 + 10 / 6, abs=1e-6)
    # Steps by acceptance length 1..4 (accepted 0..3); each request's own AL.
    assert profile["acceptance_length_histogram"] == {"1": 1, "2": 2, "3": 1, "4": 2}
    assert profile["mean_accept_length_per_request"] == pytest.approx(
        ((1 + 4 / 3) + (1 + 6 / 3)) / 2, abs=1e-6
    )
    assert profile["schema_version"] == "1.0" and profile["measured"] is True
    assert profile["sampling"] == SAMPLING and len(profile["requests"]) == 2
    check_profile(json.loads(json.dumps(profile)))  # as written and read back


def test_a_position_never_reached_has_no_conditional_rate():
    profile = build_profile(
        [RequestRecord("a", 5, 2, [0, 0], [6, 7])], 2, SAMPLING, method="dspark"
    )
    assert profile["marginal_accept_rates"] == [0.0, 0.0]
    assert profile["conditional_accept_rates"] == [0.0, None]
    assert profile["mean_accept_length"] == 1.0


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("num_accepted_tokens_per_pos", [5, 3, 3]),
        ("marginal_accept_rates", [0.9, 0.5, 0.333333]),
        ("conditional_accept_rates", [0.833333, 0.5, 0.666667]),
        ("mean_accept_length", 2.5),
        ("num_drafts", 7),
    ],
)
def test_a_figure_that_does_not_follow_from_the_rows_is_named(key, value):
    profile = build_profile(_records(), 3, SAMPLING, method="eagle3")
    check_profile(profile)
    bad = copy.deepcopy(profile)
    bad[key] = value
    with pytest.raises(ValueError, match=key):
        check_profile(bad)
    bad = copy.deepcopy(profile)
    bad["requests"][0]["accepted_per_step"][1] = 1  # the rows changed instead
    with pytest.raises(ValueError, match="num_accepted_tokens"):
        check_profile(bad)


def test_acceptance_by_context_buckets_each_step_once():
    buckets = acceptance_by_context(_records(), edges=[0, 64, 128])
    assert buckets == [
        {
            "context_from": 0,
            "context_to": 64,
            "num_drafts": 3,
            "mean_acceptance_length": pytest.approx(1 + 4 / 3, abs=1e-6),
        },
        {
            "context_from": 64,
            "context_to": 128,
            "num_drafts": 3,
            "mean_acceptance_length": 1 + 6 / 3,
        },
    ]
    # Default edges double from 64 until past the longest context (108).
    assert [b["context_to"] for b in acceptance_by_context(_records())] == [64, 128]


@pytest.mark.parametrize(
    ("longest_prompt", "trained", "limit", "expect"),
    [
        (248, 256, 4096, []),  # 248 + 8 = 256: reaches the trained length, no more
        (249, 256, 4096, ["trained on"]),
        (249, None, 4096, []),  # trained length unknown: nothing claimed
        (249, 256, 256, ["trained on", "position limit"]),
        (248, 512, 256, []),
        (249, 512, 256, ["position limit"]),
    ],
)
def test_the_length_warning_fires_exactly_past_the_lengths(
    longest_prompt, trained, limit, expect
):
    lengths = DraftLengths(trained, Path("run/run.yaml"), limit)
    warnings = length_warnings([10, longest_prompt], 8, lengths)
    assert len(warnings) == len(expect)
    for warning, what in zip(warnings, expect, strict=True):
        assert what in warning and f"position {longest_prompt + 8}" in warning


def test_draft_lengths_come_from_the_runs_yaml_and_the_draft_config(tmp_path):
    checkpoint = tmp_path / "checkpoints" / "0"
    checkpoint.mkdir(parents=True)
    config = {"transformer_layer_config": {"max_position_embeddings": 2048}}
    (checkpoint / "config.json").write_text(json.dumps(config))
    assert draft_lengths(checkpoint) == DraftLengths(None, None, 2048)
    run_yaml = tmp_path / "checkpoints" / "run.yaml"
    run_yaml.write_text("train:\n  data:\n    total_seq_len: 256\n")
    assert draft_lengths(checkpoint) == DraftLengths(256, run_yaml, 2048)
    # Positions restart at every row: the data's longest row bounds what the
    # draft saw, when it is shorter than total_seq_len (a real prepared dataset).
    from datasets import Dataset

    rows = {"input_ids": [[1] * n for n in (50, 117, 80)], "seq_len": [50, 117, 80]}
    Dataset.from_dict(rows).save_to_disk(str(tmp_path / "data"))
    run_yaml.write_text(
        f"train:\n  data:\n    total_seq_len: 256\n    data_path: {tmp_path / 'data'}\n"
    )
    lengths = draft_lengths(checkpoint)
    assert (lengths.trained, lengths.position_limit) == (117, 2048)
    assert "longest row" in lengths.trained_from
    warning = length_warnings([120], 8, lengths)[0]
    assert "past the 117 tokens" in warning and str(tmp_path / "data") in warning
    run_yaml.write_text(  # rows as long as total_seq_len: it is the bound
        f"train:\n  data:\n    total_seq_len: 100\n    data_path: {tmp_path / 'data'}\n"
    )
    assert draft_lengths(checkpoint) == DraftLengths(100, run_yaml, 2048)


def _run(tmp_path: Path, losses: dict[int, float | None]) -> Path:
    run = tmp_path / "checkpoints"
    for epoch, loss in losses.items():
        path = run / str(epoch)
        path.mkdir(parents=True)
        (path / "config.json").write_text("{}")
        if loss is not None:
            (path / "val_metrics.json").write_text(json.dumps({"loss_epoch": loss}))
    (run / "checkpoint_best").symlink_to("1")
    return run


def test_the_epoch_table_picks_by_acceptance_not_by_loss(tmp_path):
    run = _run(tmp_path, {0: 4.0, 1: 2.5, 2: 3.0, 3: None})
    measured = {0: 1.4, 1: 1.6, 2: 1.9, 3: 1.7}
    table = epoch_table(run, lambda path: measured[int(path.name)])
    assert [r["epoch"] for r in table["epochs"]] == [0, 1, 2, 3]
    assert table["best"]["epoch"] == 2 and table["lowest_val_loss_epoch"] == 1
    assert table["best"]["val_loss"] == 3.0
    written = tmp_path / "table.json"
    written.write_text(json.dumps(table))
    assert table_choice(written) == (run / "2").resolve()
    assert table_choice(run / "2") is None  # a checkpoint, not a table


def table_rows(table: dict) -> list[EpochRow]:
    return [EpochRow(**row) for row in table["epochs"]]


def test_ties_go_to_the_lower_loss_then_the_earlier_epoch(tmp_path):
    run = _run(tmp_path, {0: 3.0, 1: 2.0, 2: 2.0})
    table = epoch_table(run, lambda path: 1.5)
    assert table["best"]["epoch"] == 1
    assert best_epoch(table_rows(table)[::-1]).epoch == 1  # whatever the order


@pytest.mark.parametrize(("given", "first_held_out"), [(None, 6), (0.5, 5)])
def test_held_out_prompts_are_the_rows_the_run_held_out(
    tmp_path, given, first_held_out
):
    """Without --train-data-ratio, the split is the one the run recorded in its
    run.yaml (0.6 of 10 rows: 6..9), not 0.9, which evaluated training rows as
    held out; a ratio given wins."""
    import yaml
    from datasets import Dataset

    from speculators_kimi.evaluate.cli import _prompts
    from speculators_kimi.evaluate.options import EvaluationOptions

    data = tmp_path / "data"
    Dataset.from_dict(
        {
            "input_ids": [[i, i + 1, i + 2] for i in range(10)],
            "loss_mask": [[0, 1, 1]] * 10,
            "seq_len": [3] * 10,
        }
    ).save_to_disk(str(data))
    checkpoint = tmp_path / "checkpoints" / "0"
    checkpoint.mkdir(parents=True)
    run_yaml = {"train": {"data": {"train_data_ratio": 0.6}}}
    (checkpoint.parent / "run.yaml").write_text(yaml.safe_dump(run_yaml))
    options = EvaluationOptions(
        draft=str(checkpoint), verifier="v", data=str(data), train_data_ratio=given
    )
    prompts, warned = _prompts(options, checkpoint)
    sources = [p.source for p in prompts]
    assert sources == [f"{data}[{i}]" for i in range(first_held_out, 10)]
    assert warned == []

    # No record (a run directory copied without it): upstream's split, said so.
    (checkpoint.parent / "run.yaml").unlink()
    options = dataclasses.replace(options, train_data_ratio=None)
    prompts, warned = _prompts(options, checkpoint)
    assert len(prompts) == 1
    assert len(warned) == 1
    assert warned[0].startswith(
        f"no run.yaml in {checkpoint} or above it: holding out the "
    )
