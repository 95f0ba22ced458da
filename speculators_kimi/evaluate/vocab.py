"""A draft's vocabulary inside the verifier's, and the token a draft proposes
from its logits: one answer for every draft the decode loop drives."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["DraftVocabulary"]


class DraftVocabulary:
    """Where each draft id sits in the target vocabulary (``d2t`` holds
    offsets; none: the same ids), and the choice of a draft token.

    :param model: a draft with ``draft_vocab_size``, ``d2t`` and a
        ``transformer_layer_config`` naming the target ``vocab_size``.
    """

    def __init__(self, model: Any, device: torch.device) -> None:
        vocab = torch.arange(model.draft_vocab_size, device=device)
        d2t = model.d2t
        #: target-vocabulary id of each draft id
        self.draft_to_target = vocab if d2t is None else vocab + d2t.to(device)
        self.target_vocab_size = int(model.config.transformer_layer_config.vocab_size)

    def choose(
        self, logits: torch.Tensor, temperature: float, gen: torch.Generator
    ) -> tuple[int, torch.Tensor | None]:
        """The proposed token (target id) from draft logits ``[draft_vocab]``:
        the argmax (greedy), or a sample of ``softmax(logits / T)`` with that
        distribution ``q`` over the target vocabulary (for rejection sampling)."""
        if temperature <= 0:
            return int(self.draft_to_target[int(torch.argmax(logits))]), None
        q = torch.softmax(logits / temperature, dim=-1)
        draft_id = int(torch.multinomial(q.cpu(), 1, generator=gen))
        return int(self.draft_to_target[draft_id]), self.target_probs(q)

    def target_probs(self, draft_probs: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary probabilities ``[..., draft_vocab]`` spread over the
        target vocabulary (0 outside the draft vocabulary)."""
        out = draft_probs.new_zeros(*draft_probs.shape[:-1], self.target_vocab_size)
        out[..., self.draft_to_target] = draft_probs
        return out
