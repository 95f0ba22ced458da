import json
import pickle

import pytest
from datasets import Dataset as HFDataset
from datasets import load_from_disk
from transformers import AutoTokenizer

from speculators.data_generation.local_render import (
    LocalChatRenderer,
    vllm_template_messages,
)
from speculators.data_generation.preprocessing import build_speculator_training_dataset
from tests.unit.mock.chat_tokenizers import (
    K25_WEATHER_CALL_RENDERED,
    WEATHER_CALL,
    write_kimi_tokenizer,
)
from tests.unit.mock.local_prepare_data import load_locally, run_prepare_data
from tests.unit.mock.render_server import serve_render

pytest.importorskip("tiktoken")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {}}},
        },
    }
]

# Text-only conversations without reasoning: the render is the same either way.
CONVERSATIONS: list[list[dict]] = [
    [
        {"role": "user", "content": "what is two plus two"},
        {"role": "assistant", "content": "four"},
    ],
    [
        {"role": "system", "content": "you are a helpful assistant"},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hello world"},
        {"role": "user", "content": "second question"},
        {"role": "assistant", "content": "second answer"},
    ],
    [
        {"role": "user", "content": "what is the weather in paris"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [WEATHER_CALL],
        },
        {
            "role": "tool",
            "tool_call_id": WEATHER_CALL["id"],
            "content": "sunny",
        },
        {"role": "assistant", "content": "it is sunny"},
    ],
]


@pytest.fixture(scope="module")
def kimi_dir(tmp_path_factory):
    return write_kimi_tokenizer(tmp_path_factory.mktemp("kimi"))


@pytest.fixture(scope="module")
def kimi_tokenizer(kimi_dir):
    return AutoTokenizer.from_pretrained(kimi_dir, trust_remote_code=True)


def _dataset() -> HFDataset:
    tools = [None, None, json.dumps(TOOLS)]
    return HFDataset.from_dict({"conversations": CONVERSATIONS, "tools": tools})


def _rows(dataset: HFDataset) -> list[tuple[list[int], list[int]]]:
    return [(row["input_ids"].tolist(), row["loss_mask"].tolist()) for row in dataset]


def test_local_render_matches_the_endpoint(kimi_dir, kimi_tokenizer):
    local = build_speculator_training_dataset(
        _dataset(),
        kimi_tokenizer,
        num_proc=1,
        render_endpoint="local",
        trust_remote_code=True,
    )
    with serve_render(kimi_tokenizer) as (url, requests):
        served = build_speculator_training_dataset(
            _dataset(), kimi_tokenizer, num_proc=1, render_endpoint=url
        )
    assert requests, "the endpoint path rendered nothing"
    assert _rows(local) == _rows(served)
    # One row per assistant turn with context; each trains its reply.
    assert len(local) == 5
    decoded = [
        kimi_tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
        for ids, mask in _rows(local)
    ]
    assert sorted(decoded) == sorted(
        [
            "</think>four<|im_end|>",
            "</think>hello world<|im_end|>",
            "</think>second answer<|im_end|>",
            "</think>it is sunny<|im_end|>",
            f"</think>{K25_WEATHER_CALL_RENDERED}<|im_end|>",
        ]
    )


def test_local_render_in_worker_processes_is_identical(kimi_tokenizer):
    def build(num_proc: int) -> HFDataset:
        return build_speculator_training_dataset(
            _dataset(),
            kimi_tokenizer,
            num_proc=num_proc,
            render_endpoint="local",
            trust_remote_code=True,
        )

    assert _rows(build(2)) == _rows(build(1))


def test_renderer_prepares_messages_as_vllm_does():
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, "b"]},
        {
            "role": "assistant",
            "content": "c",
            "reasoning": "r",
            "reasoning_content": "dropped",
            "thinking": "dropped",
            "tool_calls": [{"function": {"name": "f", "arguments": '{"x": 1}'}}],
        },
    ]
    user, assistant = vllm_template_messages(messages)
    assert user == {"role": "user", "content": "a\nb"}
    assert assistant["reasoning"] == assistant["reasoning_content"] == "r"
    assert "thinking" not in assistant
    assert assistant["tool_calls"][0]["function"]["arguments"] == {"x": 1}


def test_local_render_refuses_images():
    renderer = LocalChatRenderer("unused")
    image = {"type": "image_url", "image_url": {"url": "file:///x.png"}}
    with pytest.raises(ValueError, match="renders text only"):
        renderer.render(
            [{"role": "user", "content": [image]}], add_generation_prompt=True
        )


def test_renderer_pickles_without_its_tokenizer(kimi_dir, kimi_tokenizer):
    renderer = LocalChatRenderer(
        str(kimi_dir), trust_remote_code=True, tokenizer=kimi_tokenizer
    )
    state = pickle.dumps(renderer)
    assert len(state) < 1000
    assert pickle.loads(  # noqa: S301
        state
    ).render(CONVERSATIONS[0], add_generation_prompt=False) == renderer.render(
        CONVERSATIONS[0], add_generation_prompt=False
    )


def test_load_and_preprocess_renders_locally(kimi_dir, tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text(
        "\n".join(json.dumps({"conversations": c}) for c in CONVERSATIONS[:2])
    )
    dataset, _ = load_locally(kimi_dir, data)
    assert len(dataset) == 3


def test_workers_load_the_tokenizer_as_trusted(kimi_dir):
    # A worker receives the renderer without its tokenizer and loads it again;
    # the remote tokenizer class runs only when trust_remote_code says so.
    def loaded(trust: bool) -> str:
        renderer = LocalChatRenderer(str(kimi_dir), trust_remote_code=trust)
        worker_copy = pickle.loads(  # noqa: S301
            pickle.dumps(renderer)
        )
        return type(worker_copy.tokenizer).__name__

    assert loaded(True) == "TikTokenTokenizer"
    assert loaded(False) != "TikTokenTokenizer"


def test_prepare_data_cli_renders_locally(kimi_dir, tmp_path, monkeypatch):
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"conversations": CONVERSATIONS[0]}) + "\n")
    out = tmp_path / "out"
    assert run_prepare_data(monkeypatch, kimi_dir, data, out) == 0
    row = load_from_disk(str(out))[0]
    assert sum(row["loss_mask"]) == 3  # "</think>four<|im_end|>"
