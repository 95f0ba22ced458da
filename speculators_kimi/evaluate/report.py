"""Acceptance length of a draft over a set of prompts: the numbers users judge a
draft by before serving it.

``mean_acceptance_length`` is tokens emitted per verification forward (accepted
draft tokens plus the verifier's own), as vLLM reports it; position ``k``'s
acceptance rate is marginal, the fraction of rounds whose ``k``-th draft token
was accepted, as vLLM reports it too (the conditional rates, and the rows behind
both, are in :mod:`.profile`). Greedy decoding is checked against the verifier's
own greedy decoding of every prompt (``lossless``), which also times plain
decoding.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from .algorithms import drafter_for
from .context import acceptance_by_context
from .decode import (
    PromptResult,
    acceptance_length,
    greedy_generate,
    speculative_generate,
)
from .profile import (
    RequestRecord,
    accepted_per_position,
    accepted_steps,
    build_profile,
    conditional_rates,
    marginal_rates,
)

if TYPE_CHECKING:
    from ..verifier.causal import CausalVerifier
    from .prompts import Prompt

__all__ = ["EvaluationReport", "evaluate_draft"]


@dataclass
class EvaluationReport:
    """The result of :func:`evaluate_draft` (``--json`` writes it as is)."""

    mean_acceptance_length: float
    acceptance_rate_per_position: list[float]  # marginal, as vLLM logs it
    conditional_acceptance_rate_per_position: list[float | None]
    acceptance_by_context: list[dict[str, Any]]  # see .context
    num_prompts: int
    num_generated_tokens: int
    lossless: bool | None  # greedy only: equal to the verifier's greedy output
    mismatched_prompts: list[str]
    verifier_forwards: int
    num_speculative_tokens: int
    method: str  # the draft's speculators_model_type (eagle3, dflash, ...)
    temperature: float
    max_new_tokens: int
    wall_time_s: float
    greedy_wall_time_s: float | None  # plain decoding of the same prompts
    seed: int = 0
    #: of ``verifier_forwards``, re-runs of accepted tokens after a hybrid
    #: verifier's rollback (:mod:`speculators_kimi.verifier.cache`)
    rollback_forwards: int = 0
    #: one row per prompt (in :meth:`profile`, not in :meth:`as_dict`)
    records: list[RequestRecord] = field(default_factory=list, repr=False)

    def as_dict(self) -> dict[str, Any]:
        report = asdict(self)
        del report["records"]
        return report

    def profile(
        self, dataset: str | None = None, draft: str | None = None
    ) -> dict[str, Any]:
        """The per-position profile of this run, with its per-request rows
        (``dataset``: where the prompts came from; ``draft``: the measured
        checkpoint's :func:`~.profile.draft_digest`)."""
        sampling = {
            "temperature": self.temperature,
            "seed": self.seed,
            "max_new_tokens": self.max_new_tokens,
        }
        return build_profile(
            self.records,
            self.num_speculative_tokens,
            sampling,
            dataset,
            method=self.method,
            draft=draft,
        )


@dataclass
class _Tally:
    """What the prompts' decodings add up to, one prompt at a time; accepted
    and generated tokens are read from the records."""

    records: list[RequestRecord] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    forwards: int = 0
    rollbacks: int = 0
    spec_s: float = 0.0
    greedy_s: float = 0.0

    def add(self, prompt: Prompt, out: PromptResult, seconds: float) -> None:
        """One prompt's speculative decoding, which took ``seconds``."""
        self.records.append(
            RequestRecord(
                source=prompt.source,
                prompt_length=len(prompt.token_ids),
                num_generated_tokens=len(out.tokens),
                accepted_per_step=out.accepted,
                context_length_per_step=out.context_lengths,
            )
        )
        self.forwards += out.verifier_forwards
        self.rollbacks += out.rollback_forwards
        self.spec_s += seconds


def evaluate_draft(
    verifier: CausalVerifier,
    draft: Any,
    prompts: Sequence[Prompt],
    *,
    num_speculative_tokens: int = 3,
    max_new_tokens: int = 64,
    temperature: float = 0.0,
    seed: int = 0,
    progress: bool = True,
) -> EvaluationReport:
    """Speculative decoding of every prompt with ``draft`` (an EAGLE-3, DFlash,
    DFlash2, DSpark or XPress ``SpeculatorModel``), checked (greedy) against the
    verifier's own decoding.

    :raises ValueError: ``num_speculative_tokens`` < 1 or ``max_new_tokens`` < 1.
    """
    from tqdm.auto import tqdm

    if num_speculative_tokens < 1 or max_new_tokens < 1:
        raise ValueError("num_speculative_tokens and max_new_tokens must be >= 1")
    drafter = drafter_for(draft, verifier.device)
    gen = torch.Generator().manual_seed(seed)
    tally = _Tally()
    bar = tqdm(
        prompts, desc="evaluate", unit="prompt", disable=not progress, file=sys.stderr
    )
    for prompt in bar:
        t0 = time.perf_counter()
        out = speculative_generate(
            verifier,
            drafter,
            prompt.token_ids,
            num_speculative_tokens=num_speculative_tokens,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            generator=gen,
        )
        tally.add(prompt, out, time.perf_counter() - t0)
        if temperature <= 0:
            t0 = time.perf_counter()
            want = greedy_generate(
                verifier, prompt.token_ids, max_new_tokens=max_new_tokens
            )
            tally.greedy_s += time.perf_counter() - t0
            if want.tokens != out.tokens:
                tally.mismatched.append(prompt.source)
        bar.set_postfix(al=f"{acceptance_length(accepted_steps(tally.records)):.2f}")
    return _report(
        tally,
        num_prompts=len(prompts),
        num_speculative_tokens=num_speculative_tokens,
        method=draft.config.speculators_model_type,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        seed=seed,
    )


def _report(
    tally: _Tally,
    *,
    num_prompts: int,
    num_speculative_tokens: int,
    method: str,
    max_new_tokens: int,
    temperature: float,
    seed: int,
) -> EvaluationReport:
    """The run's numbers from its tally (greedy runs: ``lossless`` and plain
    decoding's time; sampled runs have neither)."""
    greedy = temperature <= 0
    accepted = accepted_steps(tally.records)
    reached = accepted_per_position(accepted, num_speculative_tokens)
    rounds = len(accepted)
    return EvaluationReport(
        mean_acceptance_length=acceptance_length(accepted),
        acceptance_rate_per_position=marginal_rates(reached, rounds),
        conditional_acceptance_rate_per_position=conditional_rates(reached, rounds),
        acceptance_by_context=acceptance_by_context(tally.records),
        num_prompts=num_prompts,
        num_generated_tokens=sum(r.num_generated_tokens for r in tally.records),
        lossless=not tally.mismatched if greedy else None,
        mismatched_prompts=tally.mismatched,
        verifier_forwards=tally.forwards,
        rollback_forwards=tally.rollbacks,
        num_speculative_tokens=num_speculative_tokens,
        method=method,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        wall_time_s=round(tally.spec_s, 3),
        greedy_wall_time_s=round(tally.greedy_s, 3) if greedy else None,
        seed=seed,
        records=tally.records,
    )
