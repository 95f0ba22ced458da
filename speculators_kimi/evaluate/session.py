"""A draft and its verifier, loaded together and checked against each other."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..verifier.causal import CausalVerifier, load_causal_verifier
from ..verifier.fit import DraftMismatchError, check_draft_fits
from ..verifier.loading import DTYPES
from .algorithms import check_decodable
from .report import EvaluationReport, evaluate_draft

if TYPE_CHECKING:
    from ..verifier.loading import Placement
    from .prompts import Prompt

__all__ = [
    "EvaluationSession",
    "cast_draft",
    "embedding_warning",
    "load_draft",
    "load_session",
    "resolve_dtype",
]


def resolve_dtype(dtype: str | torch.dtype, device: str) -> torch.dtype:
    """``auto``: float32 on CPU (exact comparisons), bfloat16 on a GPU."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.float32 if device == "cpu" else torch.bfloat16
    return DTYPES[dtype]


def load_draft(
    checkpoint: str | Path,
    dtype: torch.dtype | None = torch.float32,
    verifier: str | Path | None = None,
) -> Any:
    """A draft (EAGLE-3 or a block drafter) as ``speculators train`` saved it.

    :param dtype: what to cast it to; ``None`` keeps the stored dtype, and the
        tensors stay mapped from the file (no anonymous copy of a 4 GB draft).
    :param verifier: the verifier to read its verifier-owned tensors and layer
        count from, instead of the path recorded at training (which may be gone
        once the checkpoint is moved).
    :raises UnsupportedDraftError: a draft ``evaluate`` does not decode.
    """
    from speculators import SpeculatorModel, SpeculatorModelConfig
    from speculators.utils.text_config import load_config_dict

    check_decodable(checkpoint, load_config_dict(checkpoint))
    config = SpeculatorModelConfig.from_pretrained(str(checkpoint))
    if verifier is not None and config.speculators_config is not None:
        config.speculators_config.verifier.name_or_path = str(verifier)
    model = SpeculatorModel.from_pretrained(str(checkpoint), config=config)
    return (model if dtype is None else cast_draft(model, dtype)).eval()


#: Buffers that set numerics and stay float32 whatever the draft's dtype: the
#: rotary frequencies (vLLM and training compute the cos/sin tables from float32
#: frequencies; bf16 ones are off by up to 3e-3 relative, and the angle error
#: grows with the position).
EXACT_BUFFERS = ("inv_freq", "original_inv_freq")


def cast_draft(model: Any, dtype: torch.dtype) -> Any:
    """``model`` cast to ``dtype`` in place, its :data:`EXACT_BUFFERS` kept."""
    # ``to`` puts new tensors in the module; the float32 ones stay as they are.
    kept = {
        name: buf
        for name, buf in model.named_buffers()
        if name.rpartition(".")[2] in EXACT_BUFFERS
    }
    model.to(dtype)
    for name, buf in kept.items():
        owner, _, attr = name.rpartition(".")
        setattr(model.get_submodule(owner), attr, buf)
    return model


def embedding_warning(checkpoint: str | Path, draft: Any, verifier: Any) -> str | None:
    """Why the acceptance measured may not be the draft's with its own verifier:
    the draft saved a frozen copy of its verifier's input embedding (EAGLE-3,
    without ``embed_requires_grad``) that is not ``verifier``'s. A verifier of
    the same shapes but other weights (a fine-tune, another release) passes
    :func:`check_draft_fits`; this compares the tensor itself.

    :param draft: the loaded draft; :param verifier: the loaded
        :class:`~speculators_kimi.verifier.causal.CausalVerifier`.
    """
    from safetensors import safe_open

    if getattr(draft.config, "embed_requires_grad", True):
        return None
    weights = Path(checkpoint) / "model.safetensors"
    with safe_open(str(weights), framework="pt") as f:
        if "embed_tokens.weight" not in f.keys():  # noqa: SIM118
            return None  # reloaded from the verifier (the block drafters)
        stored = f.get_slice("embed_tokens.weight")[:1].dtype
    ours = draft.embed_tokens.weight
    theirs = verifier.decoder.get_input_embeddings().weight
    if theirs.device.type == "meta" or ours.shape != theirs.shape:
        return None
    # The checkpoint holds the verifier's embedding rounded to its dtype: compare
    # the verifier's rounded alike, a block of rows at a time (no full copy).
    diff = 0.0
    for start in range(0, ours.shape[0], 4096):
        mine = ours[start : start + 4096].float()
        same = theirs[start : start + 4096].to(mine.device, stored).float()
        diff = max(diff, (mine - same).abs().max().item())
    if diff == 0:
        return None
    # as recorded: load_draft points the loaded config at ``verifier``
    from speculators.utils.text_config import load_config_dict

    config = load_config_dict(checkpoint).get("speculators_config") or {}
    trained_for = (config.get("verifier") or {}).get("name_or_path")
    return (
        f"{checkpoint}'s input embedding (its verifier's, frozen in training) "
        f"differs from the verifier's by up to {diff:.3g}: the draft was trained "
        f"for another verifier ({trained_for or 'not recorded'}), and what is "
        "measured is that pairing"
    )


@dataclass
class EvaluationSession:
    """What ``evaluate`` decodes with."""

    draft: Any
    verifier: CausalVerifier

    def evaluate(self, prompts: Sequence[Prompt], **kwargs: Any) -> EvaluationReport:
        """:func:`~speculators_kimi.evaluate.report.evaluate_draft` of this pair."""
        return evaluate_draft(self.verifier, self.draft, prompts, **kwargs)

    def with_draft(self, draft: Any) -> EvaluationSession:
        """Another draft on the same loaded verifier (e.g. the untrained one)."""
        dtype = next(self.draft.parameters()).dtype
        return EvaluationSession(cast_draft(draft, dtype), self.verifier)

    def with_checkpoint(
        self, checkpoint: str | Path, verifier: str | Path
    ) -> EvaluationSession:
        """The draft at ``checkpoint`` (e.g. another epoch of the same run) on
        the same loaded verifier (at ``verifier``).

        :raises DraftMismatchError: the draft does not fit the verifier, or
            reads other aux layers than those loaded.
        """
        check_draft_fits(checkpoint, verifier)
        draft = load_draft(checkpoint, None, verifier)
        if list(draft.target_layer_ids) != list(self.draft.target_layer_ids):
            raise DraftMismatchError(
                f"draft {checkpoint} reads aux layers {draft.target_layer_ids}, "
                f"not {self.draft.target_layer_ids} as the draft loaded first"
            )
        return self.with_draft(draft)


def load_session(
    checkpoint: str | Path,
    verifier: str | Path,
    *,
    dtype: str | torch.dtype = "auto",
    device: str = "auto",
    placement: Placement | None = None,
    trust_remote_code: bool = False,
    weight_overrides: Mapping[str, str | None] | None = None,
) -> EvaluationSession:
    """The draft at ``checkpoint`` and ``verifier``'s decoder and head, on its
    aux layers (those the draft was trained on).

    :raises DraftMismatchError: the draft's geometry does not fit the verifier.
    """
    check_draft_fits(checkpoint, verifier)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    torch_dtype = resolve_dtype(dtype, device)
    draft = load_draft(checkpoint, torch_dtype, verifier)
    causal = load_causal_verifier(
        verifier,
        draft.target_layer_ids,
        dtype=torch_dtype,
        device=device,
        placement=placement,
        trust_remote_code=trust_remote_code,
        weight_overrides=weight_overrides,
    )
    return EvaluationSession(draft, causal)
