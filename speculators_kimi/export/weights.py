"""Which of the checkpoint's tensors the export serves, and why the rest are
dropped: ``t2d`` (vLLM does not read it) and the embedding when it is the
verifier's (vLLM shares the target's when the draft has none)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["embedding_is_verifiers", "native_tensors", "served_tensors"]

#: Tensors vLLM does not read, never shipped.
_UNREAD = ("t2d",)
_EMBEDDING = "embed_tokens.weight"


def _verifier_embedding(verifier: str, keys: dict[str, Any]) -> Any:
    """The embedding of the local ``verifier``, found by the checkpoint's recorded
    weight keys (as training found it)."""
    from speculators.utils.verifier_weights import (
        load_verifier_tensors,
        resolve_verifier_weights,
    )

    spec = resolve_verifier_weights(
        verifier,
        prefix=keys.get("prefix"),
        embed_key=keys.get("embed_key"),
        head_key=keys.get("head_key"),
        norm_key=keys.get("norm_key"),
    )
    return load_verifier_tensors(spec, load_norm=False).embed


def embedding_is_verifiers(
    config: dict[str, Any], embed: Any, verifier_path: str | None
) -> tuple[bool, str]:
    """Whether the draft's embedding is the verifier's, and how that is known."""
    import torch

    keys = config["speculators_config"]["verifier"].get("weights") or {}
    if verifier_path and Path(verifier_path).is_dir():
        theirs = _verifier_embedding(verifier_path, keys)
        same = theirs is not None and torch.equal(theirs.to(embed.dtype), embed)
        how = f"compared with {verifier_path}"
        return same, how + ("" if same else ": it differs")
    if not config.get("embed_requires_grad", False):
        return True, "frozen in training (embed_requires_grad false)"
    return False, "trained (embed_requires_grad true) and the verifier is not here"


def served_tensors(
    config: dict[str, Any],
    tensors: dict[str, Any],
    *,
    verifier: str | None,
    keep_embeddings: bool,
) -> tuple[dict[str, Any], dict[str, str]]:
    """The tensors to write (a new dict; ``tensors`` is left as is) and the
    dropped ones' names with why, in the order they were dropped.

    :param verifier: a local copy of the verifier to compare the embedding with.
    :param keep_embeddings: ship the embedding even when it is the verifier's.
    """
    dropped = {name: "not read by vLLM" for name in _UNREAD if name in tensors}
    if _EMBEDDING in tensors and not keep_embeddings:
        same, how = embedding_is_verifiers(config, tensors[_EMBEDDING], verifier)
        if same:
            dropped[_EMBEDDING] = f"the verifier's ({how}); vLLM shares it"
    kept = {name: t for name, t in tensors.items() if name not in dropped}
    return kept, dropped


#: Ours, never written in a full-vocabulary native layout: vLLM shares the
#: target's embedding and head.
_SHARED = ("embed_tokens.weight", "lm_head.weight", "verifier_lm_head.weight")


def native_tensors(
    tensors: dict[str, Any], rename: Callable[[str], str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The tensors of a full-vocabulary draft under the names a native layout's
    vLLM class loads (``rename`` of ours), and the dropped ones with why."""
    kept: dict[str, Any] = {}
    dropped: dict[str, str] = {}
    for name, tensor in tensors.items():
        if name in _SHARED:
            dropped[name] = "the verifier's; vLLM shares the target's"
        elif name in ("t2d", "d2t"):
            dropped[name] = "not read by vLLM (full vocabulary)"
        else:
            kept[rename(name)] = tensor
    return kept, dropped
