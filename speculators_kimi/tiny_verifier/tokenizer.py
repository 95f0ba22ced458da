"""The tiny verifiers' tokenizer: whitespace word level, with a chat template.

One tokenizer for every family, so their datasets and special-token ids agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tokenizers import Tokenizer, decoders
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import PreTrainedTokenizerFast

from .specs import NUM_SPECIAL_TOKENS, TinyVerifierSpec

__all__ = [
    "CHAT_TEMPLATE",
    "SPECIAL_TOKENS",
    "SPECIAL_TOKEN_ROLES",
    "build_tokenizer",
    "token_ids",
]

SPECIAL_TOKENS: tuple[str, ...] = (
    "<pad>",
    "<unk>",
    "<s>",
    "</s>",
    "<|user|>",
    "<|assistant|>",
    "<|end|>",
    "<mask>",
)
assert len(SPECIAL_TOKENS) == NUM_SPECIAL_TOKENS

#: Roles of the special tokens, passed to the HF tokenizer wrapper.
SPECIAL_TOKEN_ROLES: dict[str, str] = {
    "bos_token": "<s>",
    "eos_token": "</s>",
    "unk_token": "<unk>",
    "pad_token": "<pad>",
    "mask_token": "<mask>",
}

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|> ' + message['content'] + ' <|end|> ' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|> ' }}{% endif %}"
)


def build_tokenizer(
    spec: TinyVerifierSpec, words: Sequence[str] = ()
) -> PreTrainedTokenizerFast:
    """A whitespace word-level tokenizer over ``words`` then ``w0, w1, ...``.

    The vocabulary holds the special tokens and exactly ``spec.num_words`` words:
    the given ``words`` first, filled up with ``w<i>``.
    """
    words = list(dict.fromkeys(words))[: spec.num_words]
    known = set(words)
    filler = (f"w{i}" for i in range(2 * spec.num_words))
    words += [w for w in filler if w not in known][: spec.num_words - len(words)]
    vocab = {tok: i for i, tok in enumerate([*SPECIAL_TOKENS, *words])}
    unk = SPECIAL_TOKEN_ROLES["unk_token"]
    backend = Tokenizer(WordLevel(vocab=vocab, unk_token=unk))
    backend.pre_tokenizer = WhitespaceSplit()
    backend.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        **SPECIAL_TOKEN_ROLES,
        chat_template=CHAT_TEMPLATE,
        model_max_length=4096,
    )


def token_ids(tokenizer: Any) -> dict[str, int]:
    """The config's ``bos/eos/pad_token_id``: a turn ends with ``<|end|>``."""
    return {
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.convert_tokens_to_ids("<|end|>"),
        "pad_token_id": tokenizer.pad_token_id,
    }
