"""Render conversations with the verifier's chat template, without a vLLM server.

``speculators prepare-data --render-endpoint local`` renders here. The result is the
same as vLLM's ``/v1/chat/completions/render`` endpoint for text-only conversations,
because the messages are prepared the way vLLM's chat parser prepares them before
the template sees them:

- assistant reasoning is read from ``reasoning`` only and given to the template as
  both ``reasoning`` and ``reasoning_content``; other reasoning keys are dropped;
- text content parts are joined with newlines into a string;
- tool-call ``arguments`` given as JSON strings are parsed into dicts;
- the template is applied with ``tools`` and ``chat_template_kwargs``, and the text
  tokenized without adding special tokens (``apply_chat_template`` does both).

Truncation follows the endpoint's ``truncate_prompt_tokens`` / ``truncation_side``.
"""

import json
from typing import TYPE_CHECKING, Any, Literal, cast

from transformers import AutoTokenizer, PreTrainedTokenizerBase

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["LOCAL_RENDER_ENDPOINT", "LocalChatRenderer", "vllm_template_messages"]

#: The ``--render-endpoint`` value that selects local rendering.
LOCAL_RENDER_ENDPOINT = "local"

# Tokenizers loaded in this process, by (model, trust_remote_code). Forked map
# workers inherit the parent's entries instead of loading the tokenizer again.
_TOKENIZERS: dict[tuple[str, bool], PreTrainedTokenizerBase] = {}


def _text_content(content: Any, role: str) -> str:
    """Content as the string a text-only chat template receives."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif part.get("type") == "text":
            texts.append(part["text"])
        else:
            raise ValueError(
                f"--render-endpoint local renders text only, but a {role} message "
                f"has a {part.get('type')!r} content part. Render multimodal "
                "conversations with a vLLM server: --render-endpoint http://HOST:PORT."
            )
    return "\n".join(texts)


def _template_tool_calls(tool_calls: list[dict]) -> list[dict]:
    """Tool calls with JSON-string arguments parsed, as templates expect them."""
    parsed = []
    for call in tool_calls:
        function = call.get("function")
        if isinstance(function, dict) and isinstance(function.get("arguments"), str):
            try:
                arguments = json.loads(function["arguments"])
            except json.JSONDecodeError:
                arguments = function["arguments"]
            parsed.append(call | {"function": function | {"arguments": arguments}})
        else:
            parsed.append(call)
    return parsed


def vllm_template_messages(messages: list[dict]) -> list[dict]:
    """The messages a chat template sees when vLLM renders ``messages``.

    :param messages: OpenAI-format chat messages, as sent to the endpoint.
    :return: New message dicts, reduced to the keys vLLM passes on.
    """
    prepared = []
    for message in messages:
        role = message["role"]
        out: dict[str, Any] = {
            "role": role,
            "content": _text_content(message.get("content"), role),
        }
        if role == "assistant":
            if message.get("tool_calls") is not None:
                out["tool_calls"] = _template_tool_calls(list(message["tool_calls"]))
            if message.get("reasoning") is not None:
                out["reasoning"] = message["reasoning"]
                out["reasoning_content"] = message["reasoning"]
        elif role == "tool" and "tool_call_id" in message:
            out["tool_call_id"] = message["tool_call_id"]
        if isinstance(message.get("name"), str):
            out["name"] = message["name"]
        prepared.append(out)
    return prepared


class LocalChatRenderer:
    """Renders chat messages to token ids with the verifier's tokenizer.

    The tokenizer is kept in a per-process cache, not on the instance, so the
    renderer pickles as its model path and ``datasets.map`` workers do not
    receive the tokenizer; each process loads it once (forked workers inherit it).

    :param model: Local path or Hub id of the verifier.
    :param trust_remote_code: Whether the tokenizer's own code may be executed.
    :param tokenizer: The verifier's tokenizer, when already loaded.
    :param chat_template: A chat template to use instead of the tokenizer's, for
        verifiers whose template is held by the processor.
    """

    def __init__(
        self,
        model: str,
        *,
        trust_remote_code: bool = False,
        tokenizer: PreTrainedTokenizerBase | None = None,
        chat_template: str | None = None,
    ):
        self.model = model
        self.trust_remote_code = trust_remote_code
        self.chat_template = chat_template
        if tokenizer is not None:
            _TOKENIZERS[self._key] = tokenizer

    @property
    def _key(self) -> tuple[str, bool]:
        return (self.model, self.trust_remote_code)

    def __repr__(self) -> str:
        return f"LocalChatRenderer({self.model!r})"

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        """The verifier's tokenizer, loaded on first use in this process."""
        if self._key not in _TOKENIZERS:
            _TOKENIZERS[self._key] = AutoTokenizer.from_pretrained(
                self.model, trust_remote_code=self.trust_remote_code
            )
        return _TOKENIZERS[self._key]

    def render(
        self,
        messages: list[dict],
        *,
        add_generation_prompt: bool,
        tools: list[dict] | None = None,
        chat_template_kwargs: dict | None = None,
        truncate_prompt_tokens: int | None = None,
        truncation_side: Literal["left", "right"] | None = None,
    ) -> list[int]:
        """Token ids of ``messages`` rendered with the chat template.

        :param messages: OpenAI-format chat messages.
        :param add_generation_prompt: Whether to end with the assistant prompt.
        :param tools: Tool definitions passed to the template.
        :param chat_template_kwargs: Extra template variables (e.g. switches).
        :param truncate_prompt_tokens: Keep at most this many tokens.
        :param truncation_side: ``right`` keeps the first tokens, ``left`` (the
            default) the last.
        :return: The rendered token ids.
        """
        prepared = vllm_template_messages(messages)
        rendered = self.tokenizer.apply_chat_template(
            prepared,
            tools=cast("list[dict | Callable] | None", tools),
            chat_template=self.chat_template,
            add_generation_prompt=add_generation_prompt,
            tokenize=True,
            return_dict=False,
            **(chat_template_kwargs or {}),
        )
        ids = list(cast("list[int]", rendered))
        if truncate_prompt_tokens is not None and len(ids) > truncate_prompt_tokens:
            if truncation_side == "right":
                ids = ids[:truncate_prompt_tokens]
            else:
                ids = ids[len(ids) - truncate_prompt_tokens :]
        return ids
