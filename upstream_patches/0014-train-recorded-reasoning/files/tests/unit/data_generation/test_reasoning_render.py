"""Recorded reasoning is trained as the verifier generates it.

Kimi-K2.5-style and Qwen3-style templates on a Kimi-style tiktoken tokenizer (all
built by the tests); each case checks the decoded trained spans exactly.
"""

import json

import pytest
from datasets import Dataset as HFDataset
from transformers import AutoTokenizer

from speculators.data_generation.local_render import LocalChatRenderer
from speculators.data_generation.preprocessing import (
    _render_boundary_rows,
    build_speculator_training_dataset,
)
from speculators.data_generation.reasoning import ReasoningDroppedError
from tests.unit.mock.chat_tokenizers import (
    K25_CHAT_TEMPLATE,
    K25_WEATHER_CALL_RENDERED,
    QWEN3_CHAT_TEMPLATE,
    QWEN3_SPECIAL_TOKENS,
    WEATHER_CALL,
    write_kimi_tokenizer,
)
from tests.unit.mock.render_server import serve_render

pytest.importorskip("tiktoken")

USER = {"role": "user", "content": "what is two plus two"}
REASONING = "the user asks two plus two so two plus two equals four"
ANSWER = "four"
TOOLS = [{"type": "function", "function": {"name": "get_weather"}}]


def _reply(field: str = "reasoning_content") -> dict:
    if field == "inline":
        return {"role": "assistant", "content": f"<think>{REASONING}</think>{ANSWER}"}
    return {"role": "assistant", "content": ANSWER, field: REASONING}


@pytest.fixture(scope="module")
def kimi(tmp_path_factory):
    path = write_kimi_tokenizer(tmp_path_factory.mktemp("kimi"))
    return AutoTokenizer.from_pretrained(path, trust_remote_code=True)


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    path = write_kimi_tokenizer(
        tmp_path_factory.mktemp("qwen3"), QWEN3_CHAT_TEMPLATE, QWEN3_SPECIAL_TOKENS
    )
    return AutoTokenizer.from_pretrained(path, trust_remote_code=True)


def _build(tokenizer, conversations, tools=None, **kwargs):
    columns: dict = {"conversations": conversations}
    if tools is not None:
        columns["tools"] = tools
    return build_speculator_training_dataset(
        HFDataset.from_dict(columns),
        tokenizer,
        num_proc=1,
        render_endpoint=kwargs.pop("render_endpoint", "local"),
        trust_remote_code=True,
        **kwargs,
    )


def _spans(tokenizer, row) -> tuple[str, list[str]]:
    """The row's full text and each contiguous trained span, decoded."""
    ids, mask = row["input_ids"].tolist(), row["loss_mask"].tolist()
    spans, current = [], []
    for token, trained in zip(ids, mask, strict=True):
        if trained:
            current.append(token)
        elif current:
            spans.append(current)
            current = []
    if current:
        spans.append(current)
    return tokenizer.decode(ids), [tokenizer.decode(s) for s in spans]


@pytest.mark.parametrize(
    "field", ["reasoning_content", "reasoning", "thinking", "inline"]
)
def test_k25_trains_recorded_reasoning(kimi, field):
    (row,) = _build(kimi, [[USER, _reply(field)]])
    text, spans = _spans(kimi, row)
    assert spans == [f"{REASONING}</think>{ANSWER}<|im_end|>"]
    # `<think>` ends the generation prompt: the verifier never emits it.
    assert text.endswith(f"<|im_middle|><think>{REASONING}</think>{ANSWER}<|im_end|>")
    assert text.count("<think>") == 1


def test_no_train_reasoning_keeps_the_template_render(kimi):
    (row,) = _build(kimi, [[USER, _reply()]], train_reasoning=False)
    assert _spans(kimi, row)[1] == [f"</think>{ANSWER}<|im_end|>"]


def test_k25_without_reasoning_renders_as_before(kimi):
    (row,) = _build(kimi, [[USER, {"role": "assistant", "content": ANSWER}]])
    assert _spans(kimi, row)[1] == [f"</think>{ANSWER}<|im_end|>"]


def test_k25_multi_turn_history_renders_as_served(kimi):
    conv = [
        {"role": "system", "content": "you are a helpful assistant"},
        USER,
        _reply(),
        {"role": "user", "content": "second question"},
        {"role": "assistant", "content": "second answer", "reasoning": "think"},
    ]
    first, second = _build(kimi, [conv])
    assert _spans(kimi, first)[1] == [f"{REASONING}</think>{ANSWER}<|im_end|>"]
    text, spans = _spans(kimi, second)
    assert spans == ["think</think>second answer<|im_end|>"]
    # The earlier turn is context, rendered as history is at serving time.
    assert text == (
        "<|im_system|>system<|im_middle|>you are a helpful assistant<|im_end|>"
        "<|im_user|>user<|im_middle|>what is two plus two<|im_end|>"
        f"<|im_assistant|>assistant<|im_middle|><think></think>{ANSWER}<|im_end|>"
        "<|im_user|>user<|im_middle|>second question<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|><think>think</think>"
        "second answer<|im_end|>"
    )
    # Neither system, user nor role tokens are ever trained.
    assert not any("<|im_user|>" in s or "system" in s for s in spans)


def test_k25_tool_call_with_reasoning_prepares(kimi):
    conv = [
        {"role": "user", "content": "what is the weather in paris"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "let me check",
            "tool_calls": [WEATHER_CALL],
        },
        {"role": "tool", "tool_call_id": WEATHER_CALL["id"], "content": "sunny"},
        {"role": "assistant", "content": "it is sunny", "reasoning": "the result"},
    ]
    call, answer = _build(kimi, [conv], tools=[json.dumps(TOOLS)])
    assert _spans(kimi, call)[1] == [
        f"let me check</think>{K25_WEATHER_CALL_RENDERED}<|im_end|>"
    ]
    text, spans = _spans(kimi, answer)
    assert spans == ["the result</think>it is sunny<|im_end|>"]
    # In a tool loop K2.5 shows the call's reasoning to the verifier.
    assert "<think>let me check</think><|tool_calls_section_begin|>" in text


def test_endpoint_receives_reasoning_where_vllm_reads_it(kimi):
    conversations = [[USER, _reply("thinking")]]
    local = _build(kimi, conversations)
    with serve_render(kimi) as (url, requests):
        served = _build(kimi, conversations, render_endpoint=url)
    assert local[0]["input_ids"].tolist() == served[0]["input_ids"].tolist()
    assert local[0]["loss_mask"].tolist() == served[0]["loss_mask"].tolist()
    full = [r for r in requests if not r["add_generation_prompt"]]
    assert full[0]["messages"][-1]["reasoning"] == REASONING
    assert "thinking" not in full[0]["messages"][-1]
    assert full[0]["chat_template_kwargs"]["preserve_thinking"] is True
    prompt = [r for r in requests if r["add_generation_prompt"]]
    assert "chat_template_kwargs" not in prompt[0]


def test_qwen3_trains_reasoning_after_the_last_query(qwen3):
    conv = [
        USER,
        _reply(),
        {"role": "user", "content": "second question"},
        _reply("inline"),
    ]
    first, second = _build(qwen3, [conv])
    trained = f"<think>\n{REASONING}\n</think>\n\n{ANSWER}<|im_end|>\n"
    assert _spans(qwen3, first)[1] == [trained]
    text, spans = _spans(qwen3, second)
    assert spans == [trained]
    # Qwen3 strips reasoning from turns before the last user query.
    assert text.count(REASONING) == 1


def test_template_that_drops_reasoning_is_reported(tmp_path):
    # K2.5 behaviour without a preserve switch: reasoning cannot be trained.
    no_switch = K25_CHAT_TEMPLATE.replace(
        "{%- if preserve_thinking -%}{%- set ns.last_final = -1 -%}{%- endif -%}", ""
    )
    assert no_switch != K25_CHAT_TEMPLATE
    path = write_kimi_tokenizer(tmp_path / "kimi", no_switch)
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
    plain = [USER, {"role": "assistant", "content": ANSWER}]
    (kept,) = _build(tokenizer, [[USER, _reply()], plain])
    assert _spans(tokenizer, kept)[1] == [f"</think>{ANSWER}<|im_end|>"]
    renderer = LocalChatRenderer("kimi", tokenizer=tokenizer)
    reply = {"role": "assistant", "content": ANSWER, "reasoning": REASONING}
    with pytest.raises(ReasoningDroppedError, match="--no-train-reasoning"):
        _render_boundary_rows([USER, reply], renderer, 512)
    assert len(_build(tokenizer, [[USER, _reply()]], train_reasoning=False)) == 1


def test_renderer_sends_switches_only_to_the_trained_turn(kimi):
    renderer = LocalChatRenderer("kimi", tokenizer=kimi)
    reply = {**_reply(), "reasoning": REASONING}
    kept = renderer.render(
        [USER, reply],
        add_generation_prompt=False,
        chat_template_kwargs={"preserve_thinking": True},
    )
    blank = renderer.render([USER, reply], add_generation_prompt=False)
    assert REASONING in kimi.decode(kept)
    assert REASONING not in kimi.decode(blank)
