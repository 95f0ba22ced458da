"""Recorded reasoning of thinking verifiers, and how it reaches the chat template.

A thinking verifier (Kimi-K2.5, Qwen3, DeepSeek-R1, GLM) emits ``<think>``, its
reasoning, ``</think>`` and then the answer; a draft trained without the reasoning
learns the opposite of what the verifier does. Datasets record the reasoning in a
field (``reasoning``, ``reasoning_content``, ``thinking``) or inline in the
content. It is normalized into ``reasoning``, the one field vLLM's chat parser
reads (and passes to templates as ``reasoning`` and ``reasoning_content``).

Templates render a finished assistant turn's reasoning differently: Kimi-K2.5
renders every finished turn with an empty think block unless
``preserve_thinking`` is set. The trained turn is therefore rendered with the
switches below, while its context is rendered as at serving time.
"""

import re

__all__ = [
    "KEEP_REASONING_TEMPLATE_KWARGS",
    "ReasoningDroppedError",
    "recorded_reasoning",
    "without_reasoning",
]

#: Template variables that keep a finished turn's reasoning: ``preserve_thinking``
#: (Kimi-K2.5/K2.6, Qwen3.6) and ``clear_thinking`` (GLM-4.7). Templates that do
#: not read them are unaffected.
KEEP_REASONING_TEMPLATE_KWARGS = {"preserve_thinking": True, "clear_thinking": False}

_REASONING_FIELDS = ("reasoning", "reasoning_content", "thinking")
_INLINE = re.compile(r"\s*<think>(.*?)</think>(.*)", re.DOTALL)


class ReasoningDroppedError(ValueError):
    """The chat template renders a turn's recorded reasoning as if absent."""


def recorded_reasoning(turn: dict, content: object) -> tuple[str | None, object]:
    """The reasoning recorded for an assistant turn, and the content without it.

    :param turn: The raw turn, which may hold a reasoning field.
    :param content: The turn's content; a string that starts with a
        ``<think>...</think>`` block has it split off when no field is set.
    :return: ``(reasoning or None, content)``.
    """
    for field in _REASONING_FIELDS:
        if turn.get(field):
            return turn[field], content
    if isinstance(content, str) and (inline := _INLINE.fullmatch(content)):
        return inline.group(1).strip("\n"), inline.group(2).lstrip("\n")
    return None, content


def without_reasoning(conv: list[dict]) -> list[dict]:
    """The conversation with every turn's recorded reasoning removed."""
    return [{k: v for k, v in turn.items() if k != "reasoning"} for turn in conv]
