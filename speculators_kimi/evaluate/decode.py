"""Speculative decoding of one prompt, and plain decoding to compare with.

Each round: the draft proposes ``K`` tokens (an EAGLE-3 draft chained on its own
states, a block drafter in one block: the :class:`Drafter` strategy); one
verifier forward over ``[last, t1..tK]`` (after its KV cache) checks them. Greedy
accepts while a draft token equals the verifier's argmax; ``temperature > 0`` uses
standard rejection sampling (accept ``t`` with ``min(1, p(t)/q(t))``, else sample
``max(p - q, 0)``; all accepted: sample the bonus from ``p``), so the output
follows the verifier's own distribution. A round emits the accepted tokens plus
one from the verifier: its acceptance length. Both caches are cropped to the
committed tokens after each round; nothing before them is recomputed. A hybrid
verifier's recurrent layers cannot be cropped: they are restored and the accepted
tokens run again (:mod:`speculators_kimi.verifier.cache`), one more forward.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

import torch

from ..verifier.cache import mark, rewind, verifier_cache
from ..verifier.causal import CausalVerifier
from ..verifier.greedy import finished

__all__ = [
    "DraftRequest",
    "Drafter",
    "PromptResult",
    "Proposal",
    "acceptance_length",
    "greedy_generate",
    "speculative_generate",
]


#: What a draft proposes in a round: ``k`` draft tokens (target ids) and, when
#: sampling, their target-vocabulary distributions ``q`` (``None`` when greedy).
Proposal = tuple[list[int], list[torch.Tensor | None]]


@dataclass(frozen=True)
class DraftRequest:
    """What one round asks the draft for, in one place for every drafter (and
    every stand-in a test plants): ``k`` draft tokens after ``context``."""

    context: Sequence[int]
    #: the verifier's aux states of context positions ``committed ..`` (those
    #: not yet in the draft's cache); the last context token has none
    aux: torch.Tensor
    committed: int
    k: int
    temperature: float  # 0: greedy
    gen: torch.Generator  # what sampling draws from


class Drafter(Protocol):
    """A draft as the decode loop drives it: EAGLE-3's chained steps
    (:class:`.draft.DraftRunner`) or a block drafter's one block per round
    (:class:`.block_draft.BlockDraftRunner`)."""

    device: torch.device

    def reset(self) -> None:
        """Forget every entry (a new prompt)."""

    def crop(self, length: int) -> None:
        """Keep what was built from the first ``length`` verifier states."""

    def propose(self, request: DraftRequest) -> Proposal:
        """The draft tokens ``request`` asks for, and their distributions."""
        ...


@dataclass
class PromptResult:
    """What decoding one prompt produced."""

    tokens: list[int]  # generated (prompt excluded), cut at EOS / max_new_tokens
    accepted: list[int] = field(default_factory=list)  # draft tokens accepted per round
    #: tokens of context (prompt and output so far) when each round proposed
    context_lengths: list[int] = field(default_factory=list)
    verifier_forwards: int = 0  # prefill included
    #: of those, re-runs of accepted tokens after a hybrid verifier's rollback
    rollback_forwards: int = 0

    @property
    def rounds(self) -> int:
        return len(self.accepted)


def acceptance_length(accepted: Sequence[int]) -> float:
    """Tokens emitted per verification round: accepted draft tokens plus the
    verifier's own one, as vLLM reports mean acceptance length."""
    return (sum(accepted) + len(accepted)) / max(len(accepted), 1)


def _pick(logits: torch.Tensor, temperature: float, gen: torch.Generator) -> int:
    if temperature <= 0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits / temperature, dim=-1)
    return int(torch.multinomial(probs.cpu(), 1, generator=gen))


def _verify(
    proposed: Sequence[int],
    dists: Sequence[torch.Tensor | None],
    logits: torch.Tensor,
    temperature: float,
    gen: torch.Generator,
) -> tuple[int, int]:
    """``(accepted draft tokens, the verifier's next token)`` from the verifier's
    logits ``[k + 1, vocab]`` over ``[last, t1..tk]``."""
    if temperature <= 0:
        target = torch.argmax(logits, dim=-1).tolist()
        m = 0
        while m < len(proposed) and proposed[m] == target[m]:
            m += 1
        return m, int(target[m])
    for i, (token, q) in enumerate(zip(proposed, dists, strict=True)):
        assert q is not None
        p = torch.softmax(logits[i] / temperature, dim=-1)
        ratio = float(p[token]) / max(float(q[token]), 1e-30)
        if float(torch.rand((), generator=gen)) < min(1.0, ratio):
            continue
        residual = torch.clamp(p - q.to(p.device), min=0)
        total = float(residual.sum())
        if total <= 0:  # p == q numerically: any sample of p is exact
            residual = p
        next_token = int(torch.multinomial(residual.cpu(), 1, generator=gen))
        return i, next_token
    return len(proposed), _pick(logits[len(proposed)], temperature, gen)


@torch.no_grad()
def speculative_generate(
    verifier: CausalVerifier,
    drafter: Drafter,
    prompt: Sequence[int],
    *,
    num_speculative_tokens: int,
    max_new_tokens: int,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> PromptResult:
    """Decode ``prompt`` with the draft proposing and the verifier checking."""
    gen = generator or torch.Generator().manual_seed(0)
    v_cache = verifier_cache(verifier.decoder)
    drafter.reset()
    start = verifier.forwards
    logits, aux = verifier.forward(prompt, v_cache)
    context = list(prompt)
    context.append(_pick(logits[-1], temperature, gen))
    # New draft entries: pairs (context[j + 1], aux[j - committed]) for j >= committed.
    committed = 0
    result = PromptResult(tokens=[])
    result.tokens, done = finished(
        context[len(prompt) :], verifier.eos_ids, max_new_tokens
    )
    while not done:
        length = len(context) - 1  # tokens the verifier has seen
        proposed, dists = drafter.propose(
            DraftRequest(
                context, aux, committed, num_speculative_tokens, temperature, gen
            )
        )
        before = mark(v_cache, length)
        logits, aux_new = verifier.forward([context[-1], *proposed], v_cache)
        m, next_token = _verify(proposed, dists, logits, temperature, gen)
        result.accepted.append(m)
        result.context_lengths.append(len(context))
        emitted = [*proposed[:m], next_token]
        if m < len(proposed):  # the rejected draft tokens leave the cache
            kept = [context[-1], *proposed[:m]]
            replay = partial(verifier.forward, cache=v_cache)
            if rewind(v_cache, before, kept, replay):
                result.rollback_forwards += 1
        drafter.crop(length)
        committed, aux = length, aux_new[: m + 1]
        context += emitted
        result.tokens, done = finished(
            context[len(prompt) :], verifier.eos_ids, max_new_tokens
        )
    result.verifier_forwards = verifier.forwards - start
    return result


@torch.no_grad()
def greedy_generate(
    verifier: CausalVerifier, prompt: Sequence[int], *, max_new_tokens: int
) -> PromptResult:
    """The verifier's own greedy decoding (one token per forward, KV cache)."""
    cache = verifier_cache(verifier.decoder)
    start = verifier.forwards
    logits, _ = verifier.forward(prompt, cache)
    tokens: list[int] = []
    while True:
        tokens.append(int(torch.argmax(logits[-1])))
        tokens, done = finished(tokens, verifier.eos_ids, max_new_tokens)
        if done:
            break
        logits, _ = verifier.forward(tokens[-1:], cache)
    return PromptResult(tokens=tokens, verifier_forwards=verifier.forwards - start)
