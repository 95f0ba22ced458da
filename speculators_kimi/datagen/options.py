"""What one generation run is asked: the command's flags, or a Python caller's
keywords, read once into :class:`GenerationOptions`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..verifier.loading import DTYPES, Placement

__all__ = ["GenerationOptions"]


@dataclass(frozen=True)
class GenerationOptions:
    """One run's options, built once and passed whole to the plan and the writer."""

    verifier: str | Path
    data_path: str | Path
    #: Where ``hs_<i>.safetensors`` go (default: ``data_path/hidden_states``).
    output_dir: str | Path | None = None
    #: The aux layer ids (default: the trainer's).
    target_layer_ids: Sequence[int] | None = None
    #: A name of :data:`~speculators_kimi.verifier.loading.DTYPES`, or a dtype.
    dtype: torch.dtype | str = "bfloat16"
    device: str = "auto"
    batch_size: int = 8
    max_batch_tokens: int = 16384
    trust_remote_code: bool = False
    #: The decoder's resolution overrides, see
    #: :func:`~speculators_kimi.verifier.resolved.decoder_weights`.
    weight_overrides: Mapping[str, str | None] | None = None
    progress: bool = True
    overwrite: bool = False
    #: A verifier bigger than one device: accelerate's dispatch over GPUs, CPU
    #: and disk (``device`` is then ignored).
    placement: Placement | None = None
    #: Finished files of another verifier (another fingerprint of config and
    #: decoder weights): ``"regenerate"`` them, or ``"error"`` before any work.
    on_mismatch: str = "regenerate"

    @property
    def torch_dtype(self) -> torch.dtype:
        """``dtype`` as a ``torch.dtype``."""
        return DTYPES[self.dtype] if isinstance(self.dtype, str) else self.dtype
