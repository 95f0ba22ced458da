"""A synthetic offline EAGLE-3 dataset for a tiny verifier.

The conversations have a learnable pattern (the assistant repeats the user's
words shifted by a fixed offset); they are rendered with the verifier's chat
template by ``speculators prepare-data --render-endpoint local`` (no vLLM server).
Their hidden states come from our ``generate-hidden-states``, a command this
fixture package sits below: :func:`speculators_kimi.datagen.fixture.build_dataset`
puts the two together.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from .specs import TinyVerifierSpec

__all__ = [
    "default_target_layer_ids",
    "prepare_data",
    "prepare_synthetic_data",
    "resolve_target_layer_ids",
    "write_conversations",
]

#: prepare-data's truncation limit for the tiny datasets (they are far shorter).
DATA_SEQ_LEN = 2048


def default_target_layer_ids(num_layers: int) -> list[int] | None:
    """The aux layer ids the trainer picks when none are given: upstream's own
    default and check (:mod:`speculators.utils.target_layers`), never restated.

    Returns ``None`` when that check refuses the default (repeated or negative
    ids: verifiers with fewer than 7 layers, but 3); callers must then pass
    ``--target-layer-ids`` explicitly.
    """
    from speculators.utils import target_layers

    ids = target_layers.default_target_layer_ids(num_layers)
    try:
        target_layers.check_target_layer_ids(ids, num_layers, explicit=False)
    except ValueError:
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


def write_conversations(conversations: list[list[dict[str, str]]], path: Path) -> Path:
    """Write ``{"conversations": [...]}`` rows, prepare-data's input format."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for conv in conversations:
            f.write(json.dumps({"conversations": conv}) + "\n")
    return path


def prepare_data(
    verifier_dir: Path, jsonl: Path, data_dir: Path, seq_len: int = DATA_SEQ_LEN
) -> None:
    """Run ``speculators prepare-data --render-endpoint local`` on conversations.

    The verifier's chat template renders each conversation through
    ``transformers`` (no vLLM server); the loss mask covers the assistant turns.
    """
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
        "--render-endpoint",
        "local",
        "--seq-length",
        str(seq_len),
        "--num-preprocessing-workers",
        "1",
        # token_freq.pt: what `speculators train --draft-vocab-size` selects from.
        "--no-skip-token-freq",
        "--overwrite",
    ]
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    subprocess.run(cmd, check=True, env=env)


def prepare_synthetic_data(
    spec: TinyVerifierSpec, verifier_dir: Path, data_dir: Path
) -> Path:
    """``spec``'s synthetic conversations rendered by ``speculators prepare-data
    --render-endpoint local`` into ``data_dir`` (no hidden states yet)."""
    jsonl = data_dir.parent / f"{data_dir.name}_conversations.jsonl"
    write_conversations(_synthetic_conversations(spec), jsonl)
    prepare_data(verifier_dir, jsonl, data_dir)
    return data_dir
