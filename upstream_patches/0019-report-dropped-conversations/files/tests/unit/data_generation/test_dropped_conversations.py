"""Dropped conversations are reported by reason and input position.

Kimi-style tiktoken tokenizers with templates that fail in known ways (built by
the tests) run through the real preprocessing, ``datasets.map`` included.
"""

import json
import logging

import pytest
from datasets import Dataset as HFDataset
from transformers import AutoTokenizer

from speculators.data_generation.dropped_conversations import (
    DROPPED_COLUMN,
    DROPPED_INDEX_COLUMN,
    remove_dropped,
)
from speculators.data_generation.input_files import NoSamplesError
from speculators.data_generation.preprocessing import build_speculator_training_dataset
from tests.unit.mock.chat_tokenizers import K25_CHAT_TEMPLATE, write_kimi_tokenizer
from tests.unit.mock.local_prepare_data import load_locally

pytest.importorskip("tiktoken")

USER = {"role": "user", "content": "what is two plus two"}
PLAIN = [USER, {"role": "assistant", "content": "four"}]
REASONED = [USER, {"role": "assistant", "content": "four", "reasoning": "2+2=4"}]
#: K2.5's template without its ``preserve_thinking`` switch.
NO_SWITCH = K25_CHAT_TEMPLATE.replace(
    "{%- if preserve_thinking -%}{%- set ns.last_final = -1 -%}{%- endif -%}", ""
)
#: A template that renders history differently once a reply is appended.
REWRITES_HISTORY = (
    "{%- if messages | length > 2 and messages[-1].role == 'assistant' -%}"
    "<|im_system|>{%- endif -%}"
) + K25_CHAT_TEMPLATE


@pytest.fixture(scope="module")
def no_switch(tmp_path_factory):
    assert NO_SWITCH != K25_CHAT_TEMPLATE
    path = write_kimi_tokenizer(tmp_path_factory.mktemp("kimi"), NO_SWITCH)
    return AutoTokenizer.from_pretrained(path, trust_remote_code=True)


def _build(tokenizer, conversations, **kwargs):
    return build_speculator_training_dataset(
        HFDataset.from_dict({"conversations": conversations}),
        tokenizer,
        num_proc=1,
        render_endpoint="local",
        trust_remote_code=True,
        **kwargs,
    )


def test_dropped_conversations_are_summarized_by_reason(no_switch, caplog):
    with caplog.at_level(logging.WARNING):
        kept = _build(no_switch, [REASONED, PLAIN, REASONED])
    assert len(kept) == 1
    assert DROPPED_COLUMN not in kept.column_names
    assert "Dropped 2 conversations" in caplog.text
    assert "2 x ReasoningDroppedError (conversations 0, 2)" in caplog.text


def test_every_conversation_dropped_says_why(no_switch):
    with pytest.raises(NoSamplesError, match="every conversation.*ReasoningDropped"):
        _build(no_switch, [REASONED])
    assert len(_build(no_switch, [REASONED], allow_empty_output=True)) == 0
    assert len(_build(no_switch, [REASONED], train_reasoning=False)) == 1


def test_nothing_dropped_leaves_no_extra_column(no_switch):
    kept = _build(no_switch, [PLAIN, PLAIN])
    assert set(kept.column_names) == {"input_ids", "loss_mask", "seq_len"}


def test_unsplittable_conversation_is_reported_by_input_position(tmp_path, caplog):
    path = write_kimi_tokenizer(tmp_path / "kimi", REWRITES_HISTORY)
    data = tmp_path / "data.jsonl"
    rows = [PLAIN, PLAIN, [*PLAIN, USER, PLAIN[1]], PLAIN]
    data.write_text("\n".join(json.dumps({"conversations": c}) for c in rows))
    with caplog.at_level(logging.WARNING):
        dataset, _ = load_locally(path, data, seed=3)
    # Reported by its position in the file, although the rows were shuffled.
    assert "1 x BoundaryUnstableError (conversations 2)" in caplog.text
    assert len(dataset) == 3


@pytest.mark.parametrize(
    ("dropped", "shown"),
    [
        (3, "3 x E (conversations 0, 1, 2)"),
        (12, "12 x E (conversations 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, ...)"),
    ],
)
def test_summary_names_at_most_ten_positions(dropped, shown, caplog):
    dataset = HFDataset.from_dict(
        {
            "input_ids": [[1]] + [[]] * dropped,
            DROPPED_COLUMN: [""] + ["E: bad"] * dropped,
            DROPPED_INDEX_COLUMN: [-1, *range(dropped)],
        }
    )
    with caplog.at_level(logging.WARNING):
        kept = remove_dropped(dataset, allow_empty=False)
    assert kept.column_names == ["input_ids"]
    assert kept["input_ids"] == [[1]]
    assert shown in caplog.text
