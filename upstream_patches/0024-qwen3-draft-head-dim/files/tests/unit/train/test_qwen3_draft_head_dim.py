"""Qwen3 draft layers (the DFlash family's) for verifiers without ``head_dim``.

Qwen2 and Qwen2.5(-VL, -Omni) configs do not store ``head_dim``; ``Qwen3Config``
requires an int, so the block drafters' layer config must get the width the
draft uses (hidden size over heads), as the Llama draft computes it itself.
"""

import warnings
from pathlib import Path

import pytest

from speculators.train.cli import create_transformer_layer_config
from tests.unit.mock import verifiers


def _qwen2(path: Path) -> Path:
    return verifiers.write_config(
        path, {**verifiers.dense_text(model_type="qwen2"), "architectures": []}
    )


CASES = [
    (_qwen2, verifiers.DENSE),
    (verifiers.qwen2_5_vl, verifiers.DENSE),
    (verifiers.qwen2_5_omni, verifiers.DENSE),
    (verifiers.gemma3, verifiers.DENSE),
    (verifiers.kimi_k25_native, verifiers.MLA),
]


@pytest.mark.parametrize(
    ("builder", "expected"), CASES, ids=[case[0].__name__ for case in CASES]
)
@pytest.mark.parametrize("draft_arch", ["qwen3", "llama"])
def test_draft_head_dim(tmp_path: Path, builder, expected, draft_arch):
    path = builder(tmp_path / builder.__name__)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        draft = create_transformer_layer_config(
            verifier_name_or_path=str(path),
            num_layers=2,
            draft_arch=draft_arch,
            hidden_act=None,
            sliding_window=32,
            full_attention_indices=[0],
        )
    assert draft.model_type == draft_arch
    assert draft.head_dim == expected.head_dim
    assert draft.num_attention_heads == expected.num_attention_heads
