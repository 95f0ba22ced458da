"""Tiny random-weight Llama verifier and offline EAGLE-3 dataset for CPU smoke runs.

Builds, fully offline and deterministically:

* ``<out>/verifier``: a tiny ``LlamaForCausalLM`` (random weights) plus a small
  word-level tokenizer with a chat template, saved with ``save_pretrained`` so
  ``AutoConfig`` / ``AutoTokenizer`` / ``AutoProcessor`` load it from disk.
* ``<out>/data``: the dataset layout read by the speculators 0.9.0 trainer
  (``--data-path``): a HF ``datasets`` directory with ``input_ids``,
  ``loss_mask`` and ``seq_len`` columns, produced by ``speculators prepare-data``
  from a pre-tokenized JSONL file (no vLLM render endpoint needed), plus
  ``hidden_states/hs_<i>.safetensors`` with ``token_ids`` ``[seq]`` and
  ``hidden_states`` ``[seq, n_aux + 1, hidden]`` computed with the verifier.

Hidden states follow vLLM's extraction convention: the entry for aux layer id
``i`` is the residual stream entering decoder layer ``i`` (id ``num_layers``
meaning the output of the last layer), and the last entry is the final hidden
state *before* the final norm.

Usage::

    python -m speculators_kimi.tiny_verifier OUT_DIR

prints the ``speculators train`` command to run on the result.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from tokenizers import Tokenizer, decoders
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "TinyVerifierSpec",
    "build_dataset",
    "build_tokenizer",
    "build_verifier",
    "default_target_layer_ids",
    "main",
    "prepare_data",
    "tokenize_with_mask",
    "train_command",
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


@dataclass(frozen=True)
class TinyVerifierSpec:
    """Shape and size knobs for the tiny verifier and its dataset."""

    hidden_size: int = 64
    intermediate_size: int = 128
    num_layers: int = 8
    num_heads: int = 4
    num_kv_heads: int = 2
    num_words: int = 248
    num_samples: int = 32
    min_turn_words: int = 6
    max_turn_words: int = 24
    seed: int = 0
    target_layer_ids: tuple[int, ...] | None = field(default=None)

    @property
    def vocab_size(self) -> int:
        """Tokenizer and model vocabulary size (specials plus words)."""
        return len(SPECIAL_TOKENS) + self.num_words


def default_target_layer_ids(num_layers: int) -> list[int] | None:
    """The aux layer ids the 0.9.0 trainer picks when none are given.

    Returns ``None`` when that default would be invalid (duplicate ids, which
    happens for verifiers with fewer than 8 layers); callers must then pass
    ``--target-layer-ids`` explicitly.
    """
    ids = [2, num_layers // 2, num_layers - 3]
    if len(set(ids)) != len(ids) or min(ids) < 0:
        return None
    return ids


def resolve_target_layer_ids(spec: TinyVerifierSpec) -> tuple[list[int], bool]:
    """Aux layer ids for ``spec`` and whether they must be passed explicitly."""
    if spec.target_layer_ids is not None:
        return list(spec.target_layer_ids), True
    ids = default_target_layer_ids(spec.num_layers)
    if ids is not None:
        return ids, False
    # Spread three distinct ids over the stack for very shallow verifiers.
    n = spec.num_layers
    return sorted({min(1, n), max(n // 2, 1), n}), True


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


def build_verifier(spec: TinyVerifierSpec, out_dir: Path) -> Path:
    """Save a random-weight tiny Llama and its tokenizer under ``out_dir``."""
    torch.manual_seed(spec.seed)
    tokenizer = build_tokenizer(spec)
    config = LlamaConfig(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|end|>"),
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config).eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def _synthetic_conversations(spec: TinyVerifierSpec) -> list[list[dict[str, str]]]:
    """Deterministic user/assistant pairs with a learnable pattern.

    The assistant repeats the user's words shifted by a fixed offset, so the
    next token is partly predictable from context.
    """
    gen = torch.Generator().manual_seed(spec.seed)
    convs = []
    for _ in range(spec.num_samples):
        n = int(
            torch.randint(
                spec.min_turn_words, spec.max_turn_words + 1, (1,), generator=gen
            )
        )
        user = torch.randint(0, spec.num_words, (n,), generator=gen).tolist()
        reply = [(w + 7) % spec.num_words for w in user]
        convs.append(
            [
                {"role": "user", "content": " ".join(f"w{w}" for w in user)},
                {"role": "assistant", "content": " ".join(f"w{w}" for w in reply)},
            ]
        )
    return convs


def tokenize_with_mask(
    tokenizer: PreTrainedTokenizerFast, conv: list[dict[str, str]]
) -> tuple[list[int], list[int]]:
    """Token ids of the full conversation and a mask over assistant turns."""

    def render(turns: list[dict[str, str]], gen: bool) -> list[int]:
        return list(
            tokenizer.apply_chat_template(
                turns, tokenize=True, add_generation_prompt=gen, return_dict=False
            )
        )

    full_ids = render(conv, False)
    mask = [0] * len(full_ids)
    for k, turn in enumerate(conv):
        if turn["role"] != "assistant":
            continue
        start = len(render(conv[:k], True))
        end = len(render(conv[: k + 1], False))
        if full_ids[:end] != render(conv[: k + 1], False):
            raise RuntimeError("chat template rendering is not prefix-stable")
        mask[start:end] = [1] * (end - start)
    return full_ids, mask


def prepare_data(verifier_dir: Path, jsonl: Path, data_dir: Path, seq_len: int) -> None:
    """Run ``speculators prepare-data`` offline on a pre-tokenized JSONL file."""
    cmd = [
        sys.executable,
        "-m",
        "speculators",
        "prepare-data",
        "--model",
        str(verifier_dir),
        "--data",
        str(jsonl),
        "--output",
        str(data_dir),
        "--seq-length",
        str(seq_len),
        "--num-preprocessing-workers",
        "1",
        "--overwrite",
    ]
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    subprocess.run(cmd, check=True, env=env)


def build_dataset(
    spec: TinyVerifierSpec,
    verifier_dir: Path,
    data_dir: Path,
    *,
    use_prepare_data: bool = True,
) -> Path:
    """Write the trainer's offline dataset for ``verifier_dir`` into ``data_dir``.

    With ``use_prepare_data`` the dataset directory is produced by
    ``speculators prepare-data`` (needs ``speculators`` importable); otherwise
    the same columns are written directly with ``datasets``.
    """
    from datasets import Dataset

    from .datagen import generate_hidden_states

    tokenizer = PreTrainedTokenizerFast.from_pretrained(verifier_dir)
    rows = [tokenize_with_mask(tokenizer, c) for c in _synthetic_conversations(spec)]
    seq_len = max(len(ids) for ids, _ in rows)

    if use_prepare_data:
        jsonl = data_dir.parent / f"{data_dir.name}_pretokenized.jsonl"
        jsonl.parent.mkdir(parents=True, exist_ok=True)
        with jsonl.open("w") as f:
            for ids, mask in rows:
                f.write(json.dumps({"input_ids": ids, "loss_mask": mask}) + "\n")
        prepare_data(verifier_dir, jsonl, data_dir, seq_len)
    else:
        dataset = Dataset.from_dict(
            {
                "input_ids": [ids for ids, _ in rows],
                "loss_mask": [mask for _, mask in rows],
                "seq_len": [len(ids) for ids, _ in rows],
            }
        )
        dataset.set_format("torch")  # the trainer compares tensors, as prepare-data
        dataset.save_to_disk(str(data_dir))

    layer_ids, _ = resolve_target_layer_ids(spec)
    generate_hidden_states(
        verifier_dir,
        data_dir,
        target_layer_ids=layer_ids,
        dtype=torch.float32,
        device="cpu",
        progress=False,
    )
    return data_dir


def train_command(
    spec: TinyVerifierSpec,
    verifier_dir: Path,
    data_dir: Path,
    save_dir: Path,
    *,
    max_steps: int = 3,
    total_seq_len: int = 128,
) -> list[str]:
    """The ``speculators train`` argv for a tiny CPU run on the built artifacts."""
    cmd = [
        "speculators",
        "train",
        "--verifier-name-or-path",
        str(verifier_dir),
        "--data-path",
        str(data_dir),
        "--speculator-type",
        "eagle3",
        "--total-seq-len",
        str(total_seq_len),
        "--epochs",
        "1",
        "--max-steps",
        str(max_steps),
        "--num-workers",
        "0",
        "--on-missing",
        "raise",
        "--save-path",
        str(save_dir / "checkpoints"),
        "--log-dir",
        str(save_dir / "logs"),
        "--no-resume-from-checkpoint",
    ]
    layer_ids, explicit = resolve_target_layer_ids(spec)
    if explicit:
        cmd += ["--target-layer-ids", *map(str, layer_ids)]
    return cmd


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: build verifier + dataset under OUT_DIR and print the train command."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--num-layers", type=int, default=TinyVerifierSpec.num_layers)
    parser.add_argument("--num-samples", type=int, default=TinyVerifierSpec.num_samples)
    parser.add_argument("--seed", type=int, default=TinyVerifierSpec.seed)
    parser.add_argument(
        "--no-prepare-data",
        action="store_true",
        help="Write the dataset directory directly instead of via prepare-data.",
    )
    args = parser.parse_args(argv)

    spec = TinyVerifierSpec(
        num_layers=args.num_layers, num_samples=args.num_samples, seed=args.seed
    )
    out: Path = args.out_dir.resolve()
    verifier_dir = build_verifier(spec, out / "verifier")
    data_dir = build_dataset(
        spec, verifier_dir, out / "data", use_prepare_data=not args.no_prepare_data
    )
    print(shlex.join(train_command(spec, verifier_dir, data_dir, out / "run")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
