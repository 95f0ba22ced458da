"""The per-position acceptance profile of a draft, in the terms serving tools use.

Each verification step (vLLM's "draft") proposes ``K`` tokens and accepts the
first ``m`` of them. Per position ``k = 1..K``:

- the **marginal** rate is the share of steps that accepted at least ``k`` tokens
  (vLLM's ``num_accepted_tokens_per_pos[k-1] / num_drafts``, what its logs and
  metrics report per position);
- the **conditional** rate is the share of steps accepting at least ``k`` among
  those that accepted at least ``k - 1`` (the chance position ``k`` survives once
  reached).

Mean acceptance length (tokens emitted per step, the verifier's own included)
is then ``1 + sum(marginal)``. The profile keeps one row per request, so every
rate recomputes from the rows (:func:`check_profile`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "PROFILE_FORMAT",
    "RequestRecord",
    "accepted_per_position",
    "build_profile",
    "check_profile",
    "conditional_rates",
    "marginal_rates",
]

#: ``format`` of the JSON file ``evaluate --profile`` writes.
PROFILE_FORMAT = "speculators-kimi/acceptance-profile/v1"

#: Rates are written to this many decimals; AL = 1 + sum(marginal) holds to it.
DECIMALS = 6


@dataclass(frozen=True)
class RequestRecord:
    """One request as decoded: what it was and what each step accepted."""

    source: str
    prompt_length: int
    num_generated_tokens: int
    accepted_per_step: list[int]
    context_length_per_step: list[int]  # tokens before each step's proposals

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def accepted_per_position(steps: Sequence[int], k: int) -> list[int]:
    """Steps that accepted at least ``i`` tokens, for ``i = 1..k`` (vLLM's
    ``num_accepted_tokens_per_pos``)."""
    return [sum(1 for m in steps if m >= i) for i in range(1, k + 1)]


def marginal_rates(counts: Sequence[int], num_drafts: int) -> list[float]:
    """Per position: reached / all steps (0 with no step)."""
    return [c / num_drafts if num_drafts else 0.0 for c in counts]


def conditional_rates(counts: Sequence[int], num_drafts: int) -> list[float | None]:
    """Per position: reached / reached the position before (``None`` where the
    position before was never reached, so the rate is undefined)."""
    before = [num_drafts, *counts[:-1]]
    return [c / b if b else None for c, b in zip(counts, before, strict=True)]


def _rounded(values: Sequence[float | None]) -> list[float | None]:
    return [None if v is None else round(v, DECIMALS) for v in values]


def build_profile(
    records: Sequence[RequestRecord],
    num_speculative_tokens: int,
    sampling: Mapping[str, Any],
) -> dict[str, Any]:
    """The profile of ``records``: counts, both rates, the mean acceptance length
    and the rows behind them.

    :raises ValueError: a step accepted more than ``num_speculative_tokens``.
    """
    k = num_speculative_tokens
    steps = [m for record in records for m in record.accepted_per_step]
    if any(not 0 <= m <= k for m in steps):
        raise ValueError(f"a step accepted outside 0..{k} tokens")
    counts = accepted_per_position(steps, k)
    marginal = marginal_rates(counts, len(steps))
    return {
        "format": PROFILE_FORMAT,
        "num_speculative_tokens": k,
        "sampling": dict(sampling),
        "num_requests": len(records),
        "num_drafts": len(steps),
        "num_draft_tokens": len(steps) * k,
        "num_accepted_tokens": sum(steps),
        "num_accepted_tokens_per_pos": counts,
        "marginal_acceptance_rate_per_pos": _rounded(marginal),
        "conditional_acceptance_rate_per_pos": _rounded(
            conditional_rates(counts, len(steps))
        ),
        "mean_acceptance_length": round(1 + sum(marginal), DECIMALS) if steps else None,
        "requests": [record.as_dict() for record in records],
    }


def check_profile(profile: Mapping[str, Any]) -> None:
    """Recompute every count and rate of ``profile`` from its request rows and
    check AL = 1 + the sum of the marginal rates.

    :raises ValueError: a figure does not follow from the rows (named).
    """
    k = profile["num_speculative_tokens"]
    records = [RequestRecord(**row) for row in profile["requests"]]
    again = build_profile(records, k, profile["sampling"])
    for key, value in again.items():
        if profile.get(key) != value:
            raise ValueError(f"profile {key}: {profile.get(key)!r}; rows: {value!r}")
    al = profile["mean_acceptance_length"]
    marginal = profile["marginal_acceptance_rate_per_pos"]
    if al is not None and abs(al - 1 - sum(marginal)) > k * 10**-DECIMALS:
        raise ValueError(f"mean_acceptance_length {al} != 1 + sum of marginal rates")
