"""A synthetic offline EAGLE-3 dataset for a tiny verifier, and the train command.

The conversations have a learnable pattern (the assistant repeats the user's
words shifted by a fixed offset); they are rendered with the verifier's chat
template, turned into upstream's dataset by ``speculators prepare-data`` (from a
pre-tokenized JSONL file: no vLLM render endpoint), and given hidden states by
our ``generate-hidden-states``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast

from .specs import TinyVerifierSpec

__all__ = [
    "build_dataset",
    "default_target_layer_ids",
    "prepare_data",
    "resolve_target_layer_ids",
    "tokenize_with_mask",
    "train_command",
]


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

    from ..datagen import generate_hidden_states

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
