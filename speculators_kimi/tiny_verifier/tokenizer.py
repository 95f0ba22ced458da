"""The tiny verifiers' tokenizer: whitespace word level, with a chat template.

One tokenizer for every family, so their datasets and special-token ids agree;
Qwen3.5's is byte-level BPE (:func:`build_byte_level_tokenizer`), because
``transformers`` loads every ``qwen3_5`` checkpoint's tokenizer as its own BPE
class, whatever ``tokenizer_config.json`` names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE, WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import PreTrainedTokenizerFast

from .specs import NUM_SPECIAL_TOKENS, TinyVerifierSpec

__all__ = [
    "CHAT_TEMPLATE",
    "SPECIAL_TOKENS",
    "SPECIAL_TOKEN_ROLES",
    "build_byte_level_tokenizer",
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


#: Qwen3.5's pre-tokenizer split: a letter run with the space before it, and
#: each digit alone.
_QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def build_byte_level_tokenizer(spec: TinyVerifierSpec) -> PreTrainedTokenizerFast:
    """The tiny words ``w<i>`` as Qwen3.5's byte-level BPE spells them.

    ``transformers`` rebuilds a ``qwen3_5`` tokenizer as ``Qwen3_5Tokenizer``
    (byte-level BPE, its own split) from the saved vocabulary and merges, so a
    word-level one encodes every word to nothing. Here ``" w12"`` is ``" w"``,
    ``"1"``, ``"2"``; the special tokens keep their ids, unused entries fill the
    vocabulary to ``spec.vocab_size``.
    """
    pieces = ["\u0120", "w", "\u0120w", *"0123456789"]  # \u0120: a space, byte-level
    tokens = [*SPECIAL_TOKENS, *pieces]
    tokens += [f"<unused{i}>" for i in range(spec.vocab_size - len(tokens))]
    backend = Tokenizer(
        BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=[("\u0120", "w")])
    )
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_QWEN_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        **SPECIAL_TOKEN_ROLES,
        chat_template=CHAT_TEMPLATE,
        model_max_length=4096,
    )
    roles = set(SPECIAL_TOKEN_ROLES.values())
    tokenizer.add_special_tokens(
        {"additional_special_tokens": [t for t in SPECIAL_TOKENS if t not in roles]}
    )
    return tokenizer


def token_ids(tokenizer: Any) -> dict[str, int]:
    """The config's ``bos/eos/pad_token_id``: a turn ends with ``<|end|>``."""
    return {
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.convert_tokens_to_ids("<|end|>"),
        "pad_token_id": tokenizer.pad_token_id,
    }
