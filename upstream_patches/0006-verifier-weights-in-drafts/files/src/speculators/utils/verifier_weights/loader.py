"""Read the resolved verifier tensors, opening only the shards that hold them."""

from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from speculators.utils.verifier_weights.files import resolve_checkpoint_file
from speculators.utils.verifier_weights.spec import (
    TensorInfo,
    VerifierWeightsError,
    VerifierWeightSpec,
)

__all__ = ["VerifierTensors", "load_verifier_tensors"]


@dataclass
class VerifierTensors:
    """Loaded tensors (``embed`` is None when not requested)."""

    embed: torch.Tensor | None
    head: torch.Tensor
    norm_weight: torch.Tensor | None


def _read(
    spec: VerifierWeightSpec, info: TensorInfo, revision: str | None
) -> torch.Tensor:
    path = resolve_checkpoint_file(spec.source, info.shard, revision)
    try:
        with safe_open(str(path), framework="pt") as handle:
            return handle.get_tensor(info.key)
    except (SafetensorError, OSError) as err:
        raise VerifierWeightsError(
            f"Cannot read verifier tensor '{info.key}' from {Path(path)} ({err}). "
            "Re-download it."
        ) from err


def load_verifier_tensors(
    spec: VerifierWeightSpec,
    *,
    load_embed: bool = True,
    load_norm: bool = True,
    revision: str | None = None,
) -> VerifierTensors:
    """Load the resolved tensors, reading only the shards that hold them.

    :param spec: the result of
        :func:`~speculators.utils.verifier_weights.resolve_verifier_weights`.
    :param load_embed: whether to load the embedding.
    :param load_norm: whether to load the final norm.
    :param revision: the Hub revision.
    :return: the tensors, in their stored dtypes.
    :raises VerifierWeightsError: on unreadable or truncated shards.
    """
    embed = _read(spec, spec.embed, revision) if load_embed else None
    if spec.tied and embed is not None:
        head = embed
    else:
        head = _read(spec, spec.head, revision)
    norm = None
    if load_norm and spec.norm is not None:
        norm = _read(spec, spec.norm, revision)
    return VerifierTensors(embed, head, norm)
