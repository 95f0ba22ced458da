"""Tokenizers of thinking verifiers, built by the tests (no Hub access).

``write_kimi_tokenizer`` writes a directory shaped like Kimi-K2.5's: a tiktoken BPE
file (``tiktoken.model``, base64 token and rank per line), the tokenizer class as
remote code (``tokenization_kimi.py``, loaded with ``trust_remote_code``), Kimi's
special tokens at their real ids, and a chat template with K2.5's behaviour:
finished assistant turns render with an empty ``<think></think>`` block (unless
``preserve_thinking``), the ones after them with their reasoning (tool-call
loops), and the generation prompt ends in ``<think>``.
"""

import base64
import json
from pathlib import Path

from transformers import Kimi_K25Config

#: Kimi's special tokens at their ids in the real 163840-token vocabulary.
KIMI_SPECIAL_TOKENS = {
    163584: "[BOS]",
    163585: "[EOS]",
    163586: "<|im_end|>",
    163587: "<|im_user|>",
    163588: "<|im_assistant|>",
    163594: "<|im_system|>",
    163595: "<|tool_calls_section_begin|>",
    163596: "<|tool_calls_section_end|>",
    163597: "<|tool_call_begin|>",
    163598: "<|tool_call_argument_begin|>",
    163599: "<|tool_call_end|>",
    163601: "<|im_middle|>",
    163606: "<think>",
    163607: "</think>",
    163838: "[UNK]",
    163839: "[PAD]",
}
THINK_ID = 163606
END_THINK_ID = 163607

#: Words the tests' conversations use; the BPE file has merges for them.
_TEXT = (
    "hello world what is the weather in paris it sunny let me check call tool "
    "result answer first second question think about user asks so reply two plus "
    "equals four you are a helpful assistant degrees get_weather city sum"
)
WORDS = tuple(_TEXT.split())

K25_CHAT_TEMPLATE = """\
{%- set ns = namespace(last_final=-1) -%}
{%- for m in messages -%}
{%- if m.role == 'assistant' and not m.tool_calls -%}
{%- set ns.last_final = loop.index0 -%}
{%- endif -%}
{%- endfor -%}
{%- if preserve_thinking -%}{%- set ns.last_final = -1 -%}{%- endif -%}
{%- if tools -%}
<|im_system|>tool_declare<|im_middle|>{{ tools | tojson }}<|im_end|>
{%- endif -%}
{%- for m in messages -%}
{%- if m.role == 'system' -%}
<|im_system|>system<|im_middle|>{{ m.content }}<|im_end|>
{%- elif m.role == 'user' -%}
<|im_user|>user<|im_middle|>{{ m.content }}<|im_end|>
{%- elif m.role == 'tool' -%}
<|im_system|>tool<|im_middle|>## Return of {{ m.tool_call_id }}
{{ m.content }}<|im_end|>
{%- elif m.role == 'assistant' -%}
<|im_assistant|>assistant<|im_middle|>
{%- if loop.index0 <= ns.last_final -%}
<think></think>
{%- else -%}
<think>{{ m.reasoning_content or '' }}</think>
{%- endif -%}
{{ m.content }}
{%- if m.tool_calls -%}
<|tool_calls_section_begin|>
{%- for call in m.tool_calls -%}
<|tool_call_begin|>{{ call.id }}<|tool_call_argument_begin|>\
{{ call.function.arguments | tojson }}<|tool_call_end|>
{%- endfor -%}
<|tool_calls_section_end|>
{%- endif -%}
<|im_end|>
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|im_assistant|>assistant<|im_middle|>
{%- if thinking is defined and thinking is false -%}<think></think>
{%- else -%}<think>{%- endif -%}
{%- endif -%}
"""

# A tokenizer class in the shape of Kimi's tokenization_kimi.py: tiktoken BPE
# over byte-level strings, special tokens from tokenizer_config.json.
TOKENIZATION_KIMI = """\
import base64

import tiktoken
from transformers import PreTrainedTokenizer

PAT_STR = (
    r"[^\\S\\r\\n]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    r"|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
)


def _bytes_to_unicode():
    visible = [*range(33, 127), *range(161, 173), *range(174, 256)]
    chars = list(visible)
    extra = 0
    for b in range(256):
        if b not in visible:
            visible.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(visible, map(chr, chars)))


class TikTokenTokenizer(PreTrainedTokenizer):
    vocab_files_names = {"vocab_file": "tiktoken.model"}
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, vocab_file, added_tokens_decoder=None, **kwargs):
        with open(vocab_file) as f:
            ranks = {
                base64.b64decode(token): int(rank)
                for token, rank in (line.split() for line in f if line.strip())
            }
        decoder = dict(added_tokens_decoder or {})
        specials = {str(token): int(i) for i, token in decoder.items()}
        self.model = tiktoken.Encoding(
            name="kimi-test", pat_str=PAT_STR, mergeable_ranks=ranks,
            special_tokens=specials,
        )
        self.vocab_file = vocab_file
        self.byte_encoder = _bytes_to_unicode()
        self.byte_decoder = {c: b for b, c in self.byte_encoder.items()}
        self.id_to_token = {
            rank: "".join(self.byte_encoder[b] for b in token)
            for token, rank in ranks.items()
        }
        self.id_to_token.update({i: token for token, i in specials.items()})
        self.token_to_id = {t: i for i, t in self.id_to_token.items()}
        super().__init__(added_tokens_decoder=decoder, **kwargs)

    @property
    def vocab_size(self):
        return 163840

    def get_vocab(self):
        return dict(self.token_to_id)

    def _tokenize(self, text, **kwargs):
        return [self.id_to_token[i] for i in self.model.encode_ordinary(text)]

    def _convert_token_to_id(self, token):
        return self.token_to_id.get(token, 163838)

    def _convert_id_to_token(self, index):
        return self.id_to_token.get(index, "[UNK]")

    def convert_tokens_to_string(self, tokens):
        text = "".join(tokens)
        data = bytearray(self.byte_decoder[c] for c in text if c in self.byte_decoder)
        return data.decode("utf-8", errors="replace")

    def save_vocabulary(self, save_directory, filename_prefix=None):
        return (self.vocab_file,)
"""


def _bpe_ranks() -> dict[bytes, int]:
    """All single bytes, then every prefix of the words (with and without a space)."""
    ranks = {bytes([b]): b for b in range(256)}
    for word in WORDS:
        for spelled in (word, " " + word):
            raw = spelled.encode()
            for end in range(2, len(raw) + 1):
                ranks.setdefault(raw[:end], len(ranks))
    return ranks


def write_kimi_tokenizer(
    path: Path,
    chat_template: str = K25_CHAT_TEMPLATE,
    special_tokens: dict[int, str] | None = None,
) -> Path:
    """Write a Kimi-style tiktoken tokenizer (remote code) and config to ``path``.

    :param path: Directory to write (created if missing).
    :param chat_template: The template written as ``chat_template.jinja``.
    :param special_tokens: Special tokens by id; Kimi's by default.
    :return: ``path``.
    """
    path.mkdir(parents=True, exist_ok=True)
    specials = special_tokens or KIMI_SPECIAL_TOKENS
    lines = [f"{base64.b64encode(t).decode()} {r}" for t, r in _bpe_ranks().items()]
    (path / "tiktoken.model").write_text("\n".join(lines) + "\n")
    (path / "tokenization_kimi.py").write_text(TOKENIZATION_KIMI)
    (path / "chat_template.jinja").write_text(chat_template)
    roles = {"bos_token": "[BOS]", "eos_token": "[EOS]", "unk_token": "[UNK]"}
    roles = {k: v for k, v in roles.items() if v in specials.values()}
    config = {
        "tokenizer_class": "TikTokenTokenizer",
        "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
        "added_tokens_decoder": {
            str(i): {
                "content": t,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "single_word": False,
                "special": True,
            }
            for i, t in specials.items()
        },
        "model_max_length": 262144,
        **roles,
    }
    (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    Kimi_K25Config().save_pretrained(path)
    return path
