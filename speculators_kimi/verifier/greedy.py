"""The verifier's own greedy decoding of a batch of prompts (for its replies).

Used to produce data (datagen regenerates assistant replies with it) and, through
:func:`finished`, by every decoding loop to stop at EOS or the token limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from .cache import verifier_cache

if TYPE_CHECKING:
    from .causal import CausalVerifier

__all__ = ["finished", "greedy_generate_batch"]


def finished(tokens: list[int], eos: set[int], limit: int) -> tuple[list[int], bool]:
    """``tokens`` cut after the first EOS or at ``limit``; whether generation ends."""
    for i, tok in enumerate(tokens[:limit]):
        if tok in eos:
            return tokens[: i + 1], True
    return tokens[:limit], len(tokens) >= limit


@torch.no_grad()
def greedy_generate_batch(
    verifier: CausalVerifier,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    pad_token_id: int = 0,
) -> list[list[int]]:
    """Greedy decoding of several prompts at once (left-padded, one KV cache).

    For producing data (the verifier's own replies); padding may change float
    rounding, so the lossless check decodes one prompt at a time
    (:func:`speculators_kimi.evaluate.decode.greedy_generate`).
    """
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(list(prompt))
        mask[row, width - len(prompt) :] = 1
    cache = verifier_cache(verifier.decoder)
    outputs: list[list[int]] = [[] for _ in prompts]
    active = list(range(len(prompts)))
    step_ids = ids
    for _ in range(max_new_tokens):
        logits = verifier.next_token_logits(step_ids, mask, cache)
        picked = torch.argmax(logits, dim=-1).cpu()
        for row in active:
            outputs[row].append(int(picked[row]))
        active = [r for r in active if outputs[r][-1] not in verifier.eos_ids]
        if not active:
            break
        step_ids = picked[:, None]
        mask = torch.cat([mask, torch.ones((len(prompts), 1), dtype=mask.dtype)], 1)
    return [finished(out, verifier.eos_ids, max_new_tokens)[0] for out in outputs]
