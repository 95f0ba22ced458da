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
    from transformers import PretrainedConfig

__all__ = [
    "ResolvedVerifier",
    "decoder_prefix",
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
    :param prefix: the checkpoint prefix of the decoder's keys (``""``: none).
    :param trust_remote_code: whether the checkpoint's own code may run.
    """

    source: str | Path
    path: Path
    text_config: PretrainedConfig
    prefix: str
    trust_remote_code: bool = False


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


def decoder_prefix(
    verifier: Path,
    text_config: PretrainedConfig,
    *,
    trust_remote_code: bool = False,
    overrides: Mapping[str, str | None] | None = None,
) -> str:
    """The checkpoint prefix of the decoder's keys, exactly as training resolves it.

    :param overrides: ``prefix`` / ``embed_key`` / ``head_key`` / ``norm_key`` of
        :func:`resolve_verifier_weights` (the ``--verifier-*`` flags).
    :raises VerifierWeightsError: no decoder, or several, fit the text config.
    """
    from speculators.utils.verifier_weights import resolve_verifier_weights

    spec = resolve_verifier_weights(
        str(verifier),
        text_config=text_config,
        trust_remote_code=trust_remote_code,
        **{k: v for k, v in (overrides or {}).items() if v is not None},
    )
    return spec.prefix or ""


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

    :raises VerifierWeightsError: see :func:`decoder_prefix`.
    """
    prefix = decoder_prefix(
        path,
        text_config,
        trust_remote_code=trust_remote_code,
        overrides=weight_overrides,
    )
    return ResolvedVerifier(verifier, path, text_config, prefix, trust_remote_code)


def resolve_verifier(
    verifier: str | Path,
    *,
    trust_remote_code: bool = False,
    weight_overrides: Mapping[str, str | None] | None = None,
) -> ResolvedVerifier:
    """The local directory (shards checked), the text config and the decoder prefix.

    :param weight_overrides: see :func:`decoder_prefix`.
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
