"""The verifier resolved once per command: its directory, text config and decoder.

``generate-hidden-states`` needs the text config (context window, hidden size), the
shard check and the decoder prefix before any work, and then loads that decoder;
:class:`ResolvedVerifier` carries what was found to the loader, so no command reads
the config, checks the shards or searches the prefix twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import MissingInputError
from .shards import require_whole_shards

if TYPE_CHECKING:
    from speculators.utils.verifier_weights import VerifierWeightSpec
    from transformers import PretrainedConfig

__all__ = [
    "ResolvedVerifier",
    "decoder_weights",
    "final_norm_path",
    "local_verifier",
    "resolve_decoder",
    "resolve_verifier",
    "whole_local_verifier",
]


@dataclass(frozen=True)
class ResolvedVerifier:
    """A local verifier with every shard whole and its text decoder located.

    :param source: the verifier as the caller named it (messages, provenance).
    :param path: its local checkpoint directory.
    :param text_config: its text (decoder) config.
    :param weights: its embedding, head and final norm as training resolves them.
    :param trust_remote_code: whether the checkpoint's own code may run.
    """

    source: str | Path
    path: Path
    text_config: PretrainedConfig
    weights: VerifierWeightSpec
    trust_remote_code: bool = False

    @property
    def prefix(self) -> str:
        """The checkpoint prefix of the decoder's keys (``""``: none)."""
        return self.weights.prefix or ""

    @property
    def final_norm(self) -> str | None:
        """See :func:`final_norm_path`."""
        return final_norm_path(self.weights)


def final_norm_path(weights: VerifierWeightSpec) -> str | None:
    """The final norm's module path under the decoder's body (the module holding
    its embedding, which the prefix names): ``norm``, or what
    ``--verifier-norm-key`` named (LFM2's ``embedding_norm``); None when the
    norm is not under the prefix."""
    norm = weights.norm
    lead = f"{weights.prefix}." if weights.prefix else ""
    if norm is None or not norm.key.startswith(lead):
        return None
    return norm.key[len(lead) :].removesuffix(".weight")


def local_verifier(verifier: str | Path) -> Path:
    """``verifier`` as a local directory: hidden states need all its shards.

    :raises MissingInputError: it is not one (a Hub id, a missing path).
    """
    path = Path(verifier)
    if not path.is_dir():
        raise MissingInputError(
            f"verifier {verifier} is not a local directory (download it first, e.g. "
            "`hf download`)"
        )
    return path


def whole_local_verifier(verifier: str | Path) -> Path:
    """``verifier`` as a local directory whose every shard is there and whole.

    :raises MissingInputError: it is not a local directory.
    :raises BrokenShardError: a shard of its weight map is missing or damaged.
    """
    path = local_verifier(verifier)
    require_whole_shards(path)
    return path


def decoder_weights(
    verifier: Path,
    text_config: PretrainedConfig,
    *,
    trust_remote_code: bool = False,
    overrides: Mapping[str, str | None] | None = None,
) -> VerifierWeightSpec:
    """The decoder's embedding, head and final norm, exactly as training resolves
    them (the prefix of the decoder's keys with them).

    :param overrides: ``prefix`` / ``embed_key`` / ``head_key`` / ``norm_key`` of
        :func:`resolve_verifier_weights` (the ``--verifier-*`` flags).
    :raises VerifierWeightsError: no decoder, or several, fit the text config.
    """
    from speculators.utils.verifier_weights import resolve_verifier_weights

    return resolve_verifier_weights(
        str(verifier),
        text_config=text_config,
        trust_remote_code=trust_remote_code,
        **{k: v for k, v in (overrides or {}).items() if v is not None},
    )


def resolve_decoder(
    verifier: str | Path,
    path: Path,
    text_config: PretrainedConfig,
    *,
    trust_remote_code: bool = False,
    weight_overrides: Mapping[str, str | None] | None = None,
) -> ResolvedVerifier:
    """The last step of :func:`resolve_verifier`, for a caller that has checked
    ``path`` (:func:`whole_local_verifier`) and read ``text_config`` in its own order.

    :raises VerifierWeightsError: see :func:`decoder_weights`.
    """
    weights = decoder_weights(
        path,
        text_config,
        trust_remote_code=trust_remote_code,
        overrides=weight_overrides,
    )
    return ResolvedVerifier(verifier, path, text_config, weights, trust_remote_code)


def resolve_verifier(
    verifier: str | Path,
    *,
    trust_remote_code: bool = False,
    weight_overrides: Mapping[str, str | None] | None = None,
) -> ResolvedVerifier:
    """The local directory (shards checked), the text config and the decoder prefix.

    :param weight_overrides: see :func:`decoder_weights`.
    :raises MissingInputError: ``verifier`` is not a local directory.
    :raises BrokenShardError: a shard of its weight map is missing or damaged.
    :raises VerifierWeightsError: the decoder cannot be located.
    """
    from speculators.utils.text_config import load_text_config

    path = whole_local_verifier(verifier)
    text_config = load_text_config(str(path), trust_remote_code=trust_remote_code)
    return resolve_decoder(
        verifier,
        path,
        text_config,
        trust_remote_code=trust_remote_code,
        weight_overrides=weight_overrides,
    )
