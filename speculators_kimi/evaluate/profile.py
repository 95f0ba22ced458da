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

The names are those of the tools that read such a profile: vLLM's spec-decode
counters (``vllm/v1/spec_decode/metrics.py``, ``SpecDecodingStats``: its logged
and Prometheus per-position rates are ``num_accepted_tokens_per_pos[i] /
num_drafts``, marginal, as its ``synthetic_acceptance_rates`` setting takes
them), and Model-Optimizer's ``speculation_profile.json`` (schema 1.0, from its
open pull requests NVIDIA/Model-Optimizer#2247 and #2315: ``marginal_accept_rates``,
``conditional_accept_rates``, ``mean_accept_length``; its export copies the file
in under that name, as ``speculators-kimi export --profile`` does).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "SCHEMA_VERSION",
    "RequestRecord",
    "accepted_per_position",
    "accepted_steps",
    "build_profile",
    "check_profile",
    "conditional_rates",
    "draft_digest",
    "marginal_rates",
]

#: ``schema_version`` of Model-Optimizer's ``speculation_profile.json`` that the
#: profile follows (its keys, plus vLLM's counts and the per-request rows).
SCHEMA_VERSION = "1.0"
PRODUCER = "speculators-kimi evaluate"

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


def accepted_steps(records: Sequence[RequestRecord]) -> list[int]:
    """Accepted draft tokens of every verification step of ``records``, in order."""
    return [m for record in records for m in record.accepted_per_step]


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


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), DECIMALS) if values else None


def draft_digest(checkpoint: Path) -> str:
    """The sha256 of a checkpoint's ``model.safetensors``: which draft a profile
    measured, wherever the checkpoint is later found (export compares it)."""
    digest = hashlib.sha256()
    with (Path(checkpoint) / "model.safetensors").open("rb") as weights:
        while chunk := weights.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def build_profile(
    records: Sequence[RequestRecord],
    num_speculative_tokens: int,
    sampling: Mapping[str, Any],
    dataset: str | None = None,
    *,
    method: str,
    draft: str | None = None,
) -> dict[str, Any]:
    """The profile of ``records``, decoded with a ``method`` draft (its
    ``speculators_model_type``: eagle3, dflash, dflash2, dspark) whose weights'
    :func:`draft_digest` is ``draft``: counts, both rates, the mean acceptance
    length and the rows behind them.

    ``mean_accept_length`` is per step (``1 + sum(marginal)``);
    ``mean_accept_length_per_request`` the mean of each request's own;
    ``acceptance_length_histogram`` counts steps by acceptance length ``1..K+1``.

    :raises ValueError: a step accepted more than ``num_speculative_tokens``.
    """
    k = num_speculative_tokens
    steps = accepted_steps(records)
    if any(not 0 <= m <= k for m in steps):
        raise ValueError(f"a step accepted outside 0..{k} tokens")
    counts = accepted_per_position(steps, k)
    marginal = marginal_rates(counts, len(steps))
    per_request = [
        1 + sum(r.accepted_per_step) / len(r.accepted_per_step)
        for r in records
        if r.accepted_per_step
    ]
    return {
        "schema_version": SCHEMA_VERSION,
        "producer": PRODUCER,
        "measured": True,
        "method": method,
        "num_speculative_tokens": k,
        "sampling": dict(sampling),
        "measurement_conditions": {
            "dataset": dataset,
            "osl": sampling.get("max_new_tokens"),
            "num_samples": len(records),
            "draft_weights_sha256": draft,
        },
        "num_drafts": len(steps),
        "num_draft_tokens": len(steps) * k,
        "num_accepted_tokens": sum(steps),
        "num_accepted_tokens_per_pos": counts,
        "marginal_accept_rates": _rounded(marginal),
        "conditional_accept_rates": _rounded(conditional_rates(counts, len(steps))),
        "mean_accept_length": round(1 + sum(marginal), DECIMALS) if steps else None,
        "mean_accept_length_per_request": _mean(per_request),
        "acceptance_length_histogram": {
            str(n + 1): sum(1 for m in steps if m == n) for n in range(k + 1)
        },
        "requests": [record.as_dict() for record in records],
    }


def check_profile(profile: Mapping[str, Any]) -> None:
    """Recompute every count and rate of ``profile`` from its request rows and
    check AL = 1 + the sum of the marginal rates.

    :raises ValueError: a figure does not follow from the rows (named).
    """
    k = profile["num_speculative_tokens"]
    records = [RequestRecord(**row) for row in profile["requests"]]
    conditions = profile["measurement_conditions"]
    again = build_profile(
        records,
        k,
        profile["sampling"],
        conditions["dataset"],
        method=profile["method"],
        draft=conditions.get("draft_weights_sha256"),
    )
    for key, value in again.items():
        if profile.get(key) != value:
            raise ValueError(f"profile {key}: {profile.get(key)!r}; rows: {value!r}")
    al = profile["mean_accept_length"]
    marginal = profile["marginal_accept_rates"]
    if al is not None and abs(al - 1 - sum(marginal)) > k * 10**-DECIMALS:
        raise ValueError(f"mean_accept_length {al} != 1 + sum of marginal rates")
