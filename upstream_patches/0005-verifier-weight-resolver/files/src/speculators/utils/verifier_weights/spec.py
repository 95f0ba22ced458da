"""What the resolver found: exact keys, shapes, dtypes and shards."""

from dataclasses import dataclass, field

__all__ = ["TensorInfo", "VerifierWeightSpec", "VerifierWeightsError"]


class VerifierWeightsError(ValueError):
    """The verifier's embedding, head or final norm cannot be found or loaded."""


@dataclass(frozen=True)
class TensorInfo:
    """A tensor as its safetensors header describes it."""

    key: str
    shape: tuple[int, ...]
    dtype: str
    shard: str

    def describe(self) -> str:
        """:return: the key, shape, dtype and shard, for error messages."""
        shape = list(self.shape)
        return f"'{self.key}' shape={shape} dtype={self.dtype} ({self.shard})"


@dataclass
class VerifierWeightSpec:
    """The resolved keys of a verifier's embedding, head and final norm."""

    source: str
    prefix: str | None
    vocab_size: int
    hidden_size: int
    model_type: str
    embed: TensorInfo
    head: TensorInfo
    tied: bool
    norm: TensorInfo | None
    shards: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
