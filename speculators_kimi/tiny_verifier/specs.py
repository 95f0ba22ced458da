"""Size knobs of the tiny verifiers (plain dataclasses: nothing heavy imported)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["NUM_SPECIAL_TOKENS", "KimiTinySpec", "TinyVerifierSpec"]

#: Special tokens ahead of the words in every tiny tokenizer (see :mod:`.tokenizer`).
NUM_SPECIAL_TOKENS = 8


@dataclass(frozen=True)
class TinyVerifierSpec:
    """Shape and size knobs for the tiny dense verifiers and the synthetic dataset."""

    hidden_size: int = 64
    intermediate_size: int = 128
    num_layers: int = 8
    num_heads: int = 4
    num_kv_heads: int = 2
    num_words: int = 248
    num_samples: int = 32
    min_turn_words: int = 6
    max_turn_words: int = 24
    seed: int = 0
    target_layer_ids: tuple[int, ...] | None = field(default=None)

    @property
    def vocab_size(self) -> int:
        """Tokenizer and model vocabulary size (specials plus words)."""
        return NUM_SPECIAL_TOKENS + self.num_words


@dataclass(frozen=True)
class KimiTinySpec:
    """Size knobs of the Kimi-K2.5-shaped verifier; the defaults give ~1M parameters."""

    hidden_size: int = 96
    intermediate_size: int = 192
    moe_intermediate_size: int = 48
    num_layers: int = 8
    first_k_dense_replace: int = 2
    n_routed_experts: int = 4
    num_experts_per_tok: int = 2
    num_heads: int = 4
    num_words: int = 504
    max_position_embeddings: int = 1024
    seed: int = 0

    @property
    def tokenizer_spec(self) -> TinyVerifierSpec:
        """The spec its tokenizer is built from (same words, same seed)."""
        return TinyVerifierSpec(num_words=self.num_words, seed=self.seed)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer_spec.vocab_size
