"""Speculative decoding on hybrid verifiers is lossless at every accept count.

The zoo's hybrid members (``tests/upstream/test_zoo_train.py``) decode with a draft
one training step old, which accepts next to nothing, so the rounds that accept
some but not all draft tokens (where ``verifier/cache.py`` restores the recurrent
layers and re-runs a prefix) are not exercised there. Here a stand-in draft
proposes the verifier's own greedy continuation with planted errors, so rounds
accept 0, 1, 2 and all 3 tokens, on tiny Qwen3.5, Kimi-Linear, Nemotron-H and LFM2
checkpoints built with transformers' own classes; the output must equal plain
greedy decoding token for token. Negative control: the same decoding with the
rollback reduced to cropping the attention layers (the recurrent states keep the
rejected tokens) is not lossless.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from speculators_kimi import tiny_verifier as tiny
from speculators_kimi.evaluate import decode
from speculators_kimi.evaluate.decode import (
    DraftRequest,
    Proposal,
    greedy_generate,
    speculative_generate,
)
from speculators_kimi.verifier.cache import CacheMark
from speculators_kimi.verifier.causal import CausalVerifier, load_causal_verifier

BUILDS = {
    "qwen3.5": tiny.qwen3_5,
    "kimi-linear": tiny.kimi_linear,
    "nemotron-h": tiny.nemotron_h,
    "lfm2": tiny.lfm2,
}
PROMPT = [9, 40, 17, 33, 8, 99, 41, 7, 12, 60, 21]
NEW = 16
K = 3


@pytest.fixture(scope="module", params=list(BUILDS))
def verifier(request, tmp_path_factory) -> tuple[CausalVerifier, list[int]]:
    """The verifier and its plain greedy decoding of ``PROMPT``."""
    path = BUILDS[request.param](tmp_path_factory.mktemp(request.param)).path
    loaded = load_causal_verifier(path, [2, 4, 5], dtype=torch.float32)
    loaded.eos_ids = set()  # decode all NEW tokens
    return loaded, greedy_generate(loaded, PROMPT, max_new_tokens=NEW).tokens


class PlantedDraft:
    """A stand-in draft (the decode loop's ``Drafter``): proposes ``truth[i]``
    for context index ``i``, except at the indices in ``wrong`` (one more,
    modulo the vocabulary)."""

    def __init__(self, truth: Sequence[int], wrong: set[int], vocab: int) -> None:
        self.truth, self.wrong, self.vocab = list(truth), wrong, vocab
        self.device = torch.device("cpu")

    def reset(self) -> None: ...

    def crop(self, length: int) -> None: ...

    def propose(self, request: DraftRequest) -> Proposal:
        start = len(request.context)
        proposed = []
        for index in range(start, start + request.k):
            want = self.truth[index] if index < len(self.truth) else 0
            if index in self.wrong:
                want = (want + 1) % self.vocab
            proposed.append(want)
        return proposed, [None] * request.k


def _crop_only(
    cache: DynamicCache,
    before: CacheMark,
    accepted: Sequence[int],
    replay: Callable[[Sequence[int]], object],
) -> bool:
    """The naive rollback: attention layers cropped, recurrent states untouched."""
    for layer in cache.layers:
        if isinstance(layer, DynamicLayer):
            extra = layer.get_seq_length() - (before.length + len(accepted))
            if extra > 0:
                layer.crop(-extra)
    return False


def _decode(
    verifier: CausalVerifier, want: list[int]
) -> tuple[list[int], list[int], int]:
    """(speculative tokens, accepted per round, rollback re-runs), the draft
    planted on ``want``."""
    gen = torch.Generator().manual_seed(3)
    wrong = {
        i
        for i in range(len(PROMPT), len(PROMPT) + NEW + K + 1)
        if float(torch.rand((), generator=gen)) < 0.3
    }
    draft = PlantedDraft([*PROMPT, *want], wrong, int(verifier.head.shape[0]))
    out = speculative_generate(
        verifier,
        draft,  # type: ignore[arg-type]  # duck-typed DraftRunner
        PROMPT,
        num_speculative_tokens=K,
        max_new_tokens=NEW,
    )
    return out.tokens, out.accepted, out.rollback_forwards


def test_every_accept_count_is_lossless(verifier):
    got, accepted, rollbacks = _decode(*verifier)
    assert set(accepted) == set(range(K + 1)), accepted
    assert got == verifier[1]
    assert rollbacks == sum(m < K for m in accepted)  # one re-run per partial round


def test_cropping_the_attention_layers_only_is_not_lossless(verifier, monkeypatch):
    monkeypatch.setattr(decode, "rewind", _crop_only)
    got, _, _ = _decode(*verifier)
    assert got != verifier[1]
