"""Evaluation prompts: held-out rows of a prepared dataset, or a conversations JSONL.

A prompt is what the verifier sees before an assistant reply, rendered with its
chat template ending in the generation prompt. In a ``speculators prepare-data``
directory that is each row's tokens before its first trained token (its
``loss_mask``), so the prompt is rendered exactly as the training data was; the
held-out rows are those the trainer validates on (``--train-data-ratio``, the
same split expression). A JSONL of conversations is rendered with the render of
``prepare-data --render-endpoint local`` (vLLM's chat-parser conventions).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import CommandError, MissingInputError

__all__ = ["Prompt", "context_prompts", "dataset_prompts", "jsonl_prompts"]


@dataclass(frozen=True)
class Prompt:
    """Token ids of one prompt and where it came from (for reports)."""

    token_ids: list[int]
    source: str


def _split_rows(
    data_path: str | Path, train_data_ratio: float, split: str
) -> list[tuple[int, list[int], int]]:
    """``(row index, input ids, first trained position)`` of the split's rows
    that have a prompt before their first trained token.

    :raises CommandError: the split is empty, or no row of it has a prompt.
    :raises DataCheckError: ``data_path`` is not a prepare-data dataset.
    """
    from datasets import load_from_disk
    from speculators.train.data_checks import check_prepared_dataset

    check_prepared_dataset(data_path, flag="--data")
    dataset = load_from_disk(str(data_path)).with_format(None)
    n = len(dataset)
    start = int(n * train_data_ratio) if split == "val" else 0
    if start >= n:
        raise CommandError(
            f"{data_path}: train_data_ratio={train_data_ratio} holds out none of "
            f"its {n} rows; lower --train-data-ratio or use --split all"
        )
    rows = []
    for i in range(start, n):
        row = dataset[i]
        first = next((j for j, v in enumerate(row["loss_mask"]) if v), None)
        if first:  # a trained token, with a prompt before it
            rows.append((i, list(row["input_ids"]), first))
    if not rows:
        raise CommandError(f"{data_path}: no row of split {split!r} has a prompt")
    return rows


def dataset_prompts(
    data_path: str | Path,
    *,
    train_data_ratio: float = 0.9,
    split: str = "val",
    context_length: int | None = None,
) -> list[Prompt]:
    """Prompts of the rows ``speculators train`` holds out (``split="val"``), or of
    every row (``"all"``).

    :param context_length: long prompts: before each row's prompt, as many whole
        conversations of the split (the rows before it, wrapping around) as fit
        in this many tokens, so decoding starts deep into a long context.
    :raises CommandError: the split is empty, or a row has no trained token.
    :raises DataCheckError: ``data_path`` is not a prepare-data dataset.
    """
    rows = _split_rows(data_path, train_data_ratio, split)
    return _row_prompts(data_path, rows, context_length)


def context_prompts(
    data_path: str | Path,
    *,
    context_length: int,
    train_data_ratio: float = 0.9,
    split: str = "val",
    num_prompts: int | None = None,
) -> tuple[list[Prompt], str | None]:
    """The first ``num_prompts`` of :func:`dataset_prompts` with ``context_length``,
    and why they stop short of it: the split's conversations hold fewer tokens in
    all (``None`` when they hold enough: a prompt then falls short by less than
    the whole conversation that did not fit)."""
    rows = _split_rows(data_path, train_data_ratio, split)
    prompts = _row_prompts(data_path, rows, context_length)[: num_prompts or None]
    available = sum(len(ids) for _, ids, _ in rows)
    if available >= context_length:
        return prompts, None
    longest = max((len(p.token_ids) for p in prompts), default=0)
    more = "data with more conversations" if split == "all" else "--split all"
    return prompts, (
        f"--context-length {context_length}: the {split!r} split's {len(rows)} "
        f"conversations hold {available} tokens in all, so the longest prompt has "
        f"{longest}; acceptance past that is not measured: use {more}"
    )


def _row_prompts(
    data_path: str | Path,
    rows: list[tuple[int, list[int], int]],
    context_length: int | None,
) -> list[Prompt]:
    prompts = []
    for n, (i, ids, first) in enumerate(rows):
        prompt = ids[:first]
        if context_length:
            for back in range(1, len(rows)):
                earlier = rows[n - back][1]
                if len(earlier) + len(prompt) > context_length:
                    break
                prompt = earlier + prompt
        prompts.append(Prompt(prompt, f"{data_path}[{i}]"))
    return prompts


def _array_hint(line: str) -> str:
    """What to write instead when a line opens a JSON array: JSON Lines."""
    if not line.lstrip().startswith("["):
        return ""
    return (
        "; --prompts takes JSON Lines, one conversation object per line "
        '({"messages": [...]}), not one JSON array'
    )


def _messages(record: Any, where: str) -> list[dict[str, Any]]:
    from speculators.data_generation.preprocessing import _normalize_conversation

    messages = None
    if isinstance(record, dict):
        messages = record.get("messages", record.get("conversations"))
    if (
        not isinstance(messages, list)
        or not messages
        or not all(isinstance(m, dict) for m in messages)
    ):
        raise CommandError(
            f"{where}: expected an object with a 'messages' (or 'conversations') "
            "list of {'role', 'content'} (or ShareGPT {'from', 'value'}) turns"
        )
    # the turns as prepare-data reads them: ShareGPT's from/value, role names
    messages = _normalize_conversation(messages)
    last_reply = max(
        (i for i, m in enumerate(messages) if m.get("role") == "assistant"),
        default=None,
    )
    before = messages[:last_reply] if last_reply is not None else messages
    if not before:
        raise CommandError(f"{where}: no turn before the assistant reply")
    return before


def jsonl_prompts(
    path: str | Path,
    verifier: str | Path,
    *,
    trust_remote_code: bool = False,
    chat_template_kwargs: dict[str, Any] | None = None,
) -> list[Prompt]:
    """One prompt per conversation: its turns before the last assistant reply (all
    of them if it ends with a user turn), with the generation prompt.

    :raises CommandError: a line is not a conversation (file and line named).
    :raises MissingInputError: ``path`` is not a file.
    """
    from speculators.data_generation.local_render import LocalChatRenderer

    if not Path(path).is_file():
        raise MissingInputError(f"--prompts {path}: no such file")

    renderer = LocalChatRenderer(str(verifier), trust_remote_code=trust_remote_code)
    prompts = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise CommandError(f"{where}: not JSON ({err}){_array_hint(line)}") from err
        if isinstance(record, list):
            raise CommandError(f"{where}: a JSON array{_array_hint(line)}")
        ids = renderer.render(
            _messages(record, where),
            add_generation_prompt=True,
            chat_template_kwargs=chat_template_kwargs,
        )
        prompts.append(Prompt(ids, where))
    if not prompts:
        raise CommandError(f"{path}: no conversations")
    return prompts
