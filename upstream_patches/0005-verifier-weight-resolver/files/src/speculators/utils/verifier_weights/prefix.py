"""The decoder prefix: which module path of the weight map is the text decoder.

It is the path whose ``layers.<i>`` (``h.<i>``, ``blocks.<i>``) count matches the
text config's ``num_hidden_layers`` (a DeepSeek-V3 MTP layer may add
``num_nextn_predict_layers``) and whose input embedding has shape
``[vocab_size, hidden_size]``. Other towers (vision, audio, a talker) and
per-layer copies (DeepSeek MTP ``layers.<N>.embed_tokens``) never match.
"""

import re
from collections.abc import Mapping

from speculators.utils.verifier_weights.files import TensorHeaders
from speculators.utils.verifier_weights.naming import (
    EMBED_NAMES,
    LAYER_CONTAINERS,
    OVERRIDE_HINT,
)
from speculators.utils.verifier_weights.spec import TensorInfo, VerifierWeightsError

__all__ = ["ancestors", "find_decoder_prefix", "join_key", "nearest"]

_CONTAINERS = "|".join(LAYER_CONTAINERS)
_LAYER = re.compile(rf"(?:^|\.)(?:{_CONTAINERS})\.(\d+)\.")
_INSIDE_LAYER = re.compile(rf"(?:^|\.)(?:{_CONTAINERS})\.\d+(?:\.|$)")


def join_key(prefix: str, name: str) -> str:
    """:return: ``prefix.name``, or ``name`` for the empty prefix."""
    return f"{prefix}.{name}" if prefix else name


def ancestors(prefix: str) -> list[str]:
    """:return: ``prefix`` and every enclosing module path, nearest first, ending
    at the empty path."""
    parts = prefix.split(".") if prefix else []
    return [".".join(parts[:i]) for i in range(len(parts), -1, -1)]


def nearest(
    weight_map: Mapping[str, str],
    scopes: list[str],
    names: tuple[str, ...],
    leaf: str = "weight",
) -> tuple[list[str], str | None]:
    """The ``<scope>.<name>.<leaf>`` keys of the first scope that has any.

    :param weight_map: the checkpoint's weight map.
    :param scopes: module paths to try, in order.
    :param names: module names to look for (a naming family).
    :param leaf: the parameter name.
    :return: the keys found and the scope they are in (``[], None`` if none).
    """
    for scope in scopes:
        found = [
            key
            for name in names
            if (key := join_key(scope, f"{name}.{leaf}")) in weight_map
        ]
        if found:
            return found, scope
    return [], None


def _layer_prefixes(keys: list[str]) -> dict[str, set[int]]:
    """``{prefix: layer indices}`` for every ``<prefix>.<container>.<i>.`` seen."""
    found: dict[str, set[int]] = {}
    for key in keys:
        for match in _LAYER.finditer(key):
            found.setdefault(key[: match.start()], set()).add(int(match.group(1)))
    return found


def _layer_count_ok(indices: set[int], layers: int, extra: int) -> bool:
    if len(indices) == layers:
        return True
    return (
        extra > 0 and set(range(layers)) <= indices and len(indices) <= layers + extra
    )


def _without_layers(
    keys: list[str],
    headers: TensorHeaders,
    expected: tuple[int, int],
    seen: list[str],
) -> list[tuple[str, TensorInfo]]:
    """Partial checkpoints (no decoder layers): embeddings of the right shape."""
    matches = []
    for key in keys:
        parts = key.split(".")
        if parts[-1] == "weight" and parts[-2:-1] and parts[-2] in EMBED_NAMES:
            info = headers.info(key)
            scope = ".".join(parts[:-2])
            seen.append(info.describe())
            if tuple(info.shape) == expected and not _INSIDE_LAYER.search(scope):
                matches.append((scope, info))
    return matches


def find_decoder_prefix(
    headers: TensorHeaders,
    *,
    layers: int,
    extra_layers: int,
    expected: tuple[int, int],
    source: str,
    hint: str = OVERRIDE_HINT,
) -> str:
    """The decoder prefix: matching layer count and embedding shape.

    Only the shards holding candidate embeddings have their metadata read.

    :param headers: the checkpoint's tensor metadata.
    :param layers: the text config's ``num_hidden_layers``.
    :param extra_layers: layers a checkpoint may add (DeepSeek MTP).
    :param expected: the embedding shape ``(vocab_size, hidden_size)``.
    :param source: the checkpoint, for messages.
    :param hint: what to tell the user when nothing matches.
    :return: the prefix (``""`` for a checkpoint without one).
    :raises VerifierWeightsError: when no candidate or several match.
    """
    weight_map = headers.weight_map
    keys = list(weight_map)
    by_prefix = _layer_prefixes(keys)
    seen: list[str] = []
    matches: list[tuple[str, TensorInfo]] = []
    direct: list[tuple[str, TensorInfo]] = []
    for prefix in sorted(by_prefix):
        indices = by_prefix[prefix]
        if not _layer_count_ok(indices, layers, extra_layers):
            seen.append(f"prefix '{prefix}' ({len(indices)} layers)")
            continue
        embeds, scope = nearest(weight_map, ancestors(prefix), EMBED_NAMES)
        infos = [headers.info(key) for key in embeds]
        described = ", ".join(info.describe() for info in infos) or "no embedding"
        seen.append(f"prefix '{prefix}' ({len(indices)} layers; {described})")
        good = [(prefix, info) for info in infos if tuple(info.shape) == expected]
        matches.extend(good)
        if scope == prefix:
            direct.extend(good)
    if len(matches) > 1 and direct:
        # An embedding that is the decoder's own child beats one found further up.
        matches = direct
    if not by_prefix:
        matches = _without_layers(keys, headers, expected, seen)
    if len(matches) == 1:
        return matches[0][0]
    if not matches:
        raise VerifierWeightsError(
            f"No decoder in {source} has {layers} layers and an input embedding of "
            f"shape {list(expected)} (the text config's num_hidden_layers, "
            f"vocab_size and hidden_size). Seen: {'; '.join(seen) or 'nothing'}. "
            f"{hint}"
        )
    listed = "; ".join(f"prefix '{p}': {info.describe()}" for p, info in matches)
    raise VerifierWeightsError(
        f"Ambiguous verifier decoder in {source}: {len(matches)} candidates match "
        f"the text config: {listed}. {OVERRIDE_HINT}"
    )
