"""A draft and its verifier, loaded together and checked against each other."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..datagen.generate import DTYPES
from .report import EvaluationReport, evaluate_draft
from .verifier import CausalVerifier, load_causal_verifier

if TYPE_CHECKING:
    from ..datagen.verifier import Placement
    from .prompts import Prompt

__all__ = ["EvaluationSession", "load_draft", "load_session", "resolve_dtype"]


def resolve_dtype(dtype: str | torch.dtype, device: str) -> torch.dtype:
    """``auto``: float32 on CPU (exact comparisons), bfloat16 on a GPU."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.float32 if device == "cpu" else torch.bfloat16
    return DTYPES[dtype]


def load_draft(
    checkpoint: str | Path,
    dtype: torch.dtype = torch.float32,
    verifier: str | Path | None = None,
) -> Any:
    """An EAGLE-3 draft as ``speculators train`` saved it.

    :param verifier: the verifier to read its verifier-owned tensors and layer
        count from, instead of the path recorded at training (which may be gone
        once the checkpoint is moved).
    :raises TypeError: the checkpoint is not an EAGLE-3 draft.
    """
    from speculators import SpeculatorModel, SpeculatorModelConfig
    from speculators.models.eagle3 import Eagle3DraftModel

    config = SpeculatorModelConfig.from_pretrained(str(checkpoint))
    if verifier is not None and config.speculators_config is not None:
        config.speculators_config.verifier.name_or_path = str(verifier)
    model = SpeculatorModel.from_pretrained(str(checkpoint), config=config)
    if not isinstance(model, Eagle3DraftModel):
        raise TypeError(
            f"{checkpoint}: a {type(model).__name__}; evaluate runs EAGLE-3 drafts"
        )
    return model.to(dtype).eval()


def _check_pair(draft: Any, verifier: CausalVerifier, checkpoint: Path) -> None:
    """Fail before decoding when the draft was not trained for this verifier."""
    config = verifier.text_config
    problems = []
    if draft.hidden_size != int(config.hidden_size):
        problems.append(
            f"hidden size {draft.hidden_size} != verifier's {config.hidden_size}"
        )
    if draft.verifier_vocab_size != int(config.vocab_size):
        problems.append(
            f"vocabulary {draft.verifier_vocab_size} != verifier's {config.vocab_size}"
        )
    if problems:
        raise ValueError(
            f"draft {checkpoint} does not fit the verifier: " + "; ".join(problems)
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
        return EvaluationSession(
            draft.to(next(self.draft.parameters()).dtype), self.verifier
        )


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

    :raises ValueError: the draft's geometry does not fit the verifier.
    """
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
    _check_pair(draft, causal, Path(checkpoint))
    return EvaluationSession(draft, causal)
