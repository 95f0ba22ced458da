"""A tiny verifier's offline EAGLE-3 dataset, hidden states included.

The fixture package (:mod:`speculators_kimi.tiny_verifier`) writes the synthetic
conversations and runs ``speculators prepare-data`` on them; the hidden states
are this package's, so the two are put together here, above both. Used by
``python -m speculators_kimi.tiny_verifier``, the tests and the benchmarks.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..tiny_verifier.dataset import prepare_synthetic_data, resolve_target_layer_ids
from ..tiny_verifier.specs import TinyVerifierSpec
from .generate import generate_hidden_states

__all__ = ["build_dataset"]


def build_dataset(spec: TinyVerifierSpec, verifier_dir: Path, data_dir: Path) -> Path:
    """Write the trainer's offline dataset for ``verifier_dir`` into ``data_dir``.

    The synthetic conversations go through ``speculators prepare-data
    --render-endpoint local``, then our ``generate-hidden-states``.
    """
    prepare_synthetic_data(spec, verifier_dir, data_dir)
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
