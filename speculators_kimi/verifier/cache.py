"""The verifier's cache while decoding, and taking it back to the accepted tokens.

An attention layer's KV cache crops exactly to the tokens a round accepted. A
linear-attention or Mamba layer (Qwen3.5, Kimi-Linear, Nemotron-H) holds a
fixed-size conv and recurrent state that has already absorbed every verified
token; it cannot be cropped (transformers' ``Cache.is_croppable`` is False once
such a state exists, and its record-and-crop route rolls back only the conv
window: off by up to 0.12 in the logits on a tiny Kimi-Linear). For those caches
:func:`mark` copies the layers crop cannot take back before the verify forward,
and :func:`rewind` puts the copies back, crops the attention layers to the same
point and runs the accepted tokens again: one more verifier forward, of the
accepted tokens only, whose states equal a forward over exactly those tokens.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, LinearAttentionCacheLayerMixin

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = [
    "CacheMark",
    "has_recurrent_state",
    "hybrid_cache",
    "mark",
    "rewind",
    "verifier_cache",
]


def has_recurrent_state(cache: DynamicCache) -> bool:
    """Whether ``cache`` has a linear-attention or Mamba layer (a hybrid verifier)."""
    return any(isinstance(x, LinearAttentionCacheLayerMixin) for x in cache.layers)


def hybrid_cache(config: Any) -> DynamicCache | None:
    """transformers' cache built from ``config`` (one layer of the right kind per
    decoder layer) where it has recurrent layers, i.e. a hybrid verifier; else
    None."""
    cache = DynamicCache(config=config)
    return cache if has_recurrent_state(cache) else None


def verifier_cache(decoder: PreTrainedModel) -> DynamicCache:
    """An empty cache for ``decoder``.

    A hybrid decoder gets :func:`hybrid_cache` (a bare ``DynamicCache()`` fails on
    the first linear-attention layer). Any other gets the plain, lazily grown
    cache every decoding here used before, which crops exactly at any length (the
    config's sliding-window layers would refuse a crop past their window).
    """
    cache = hybrid_cache(decoder.config)
    return DynamicCache() if cache is None else cache


@dataclass(frozen=True)
class CacheMark:
    """A cache as it was before a verify forward.

    :param length: the tokens it held.
    :param saved: copies of the layers a crop cannot take back, by layer index
        (none for a cache of attention layers only).
    """

    length: int
    saved: dict[int, Any] = field(default_factory=dict)


def mark(cache: DynamicCache, length: int) -> CacheMark:
    """``cache`` (holding ``length`` tokens) before a forward that may be rejected."""
    saved = {
        i: copy.deepcopy(layer)
        for i, layer in enumerate(cache.layers)
        if type(layer) is not DynamicLayer
    }
    return CacheMark(length, saved)


def rewind(
    cache: DynamicCache,
    before: CacheMark,
    accepted: Sequence[int],
    replay: Callable[[Sequence[int]], object],
) -> bool:
    """``cache`` back to ``before`` plus the ``accepted`` tokens of the forward
    that followed it; ``replay(accepted)`` runs them through the verifier again
    where a crop cannot do it. Returns whether it did."""
    keep = before.length + len(accepted)
    if not before.saved:
        extra = cache.get_seq_length() - keep
        if extra > 0:
            cache.crop(-extra)
        return False
    for i, layer in enumerate(cache.layers):
        if i in before.saved:
            cache.layers[i] = before.saved[i]
        elif isinstance(layer, DynamicLayer):  # crop to where the mark was taken
            extra = layer.get_seq_length() - before.length
            if extra > 0:
                layer.crop(-extra)
    replay(accepted)
    return True
