"""Find the exact keys of a verifier's input embedding, output head and final norm.

Only the weight map and the metadata of the shards holding candidates are read,
using the verifier's text config: the decoder prefix (see
:mod:`~speculators.utils.verifier_weights.prefix`), then, on dot boundaries and
within the naming families of :mod:`~speculators.utils.verifier_weights.naming`,
the embedding and final norm as direct children of the prefix and the head as a
direct child of the prefix or of its nearest ancestor that has one. A missing
head is a tied head when the text config says so, else an error; a head stored
in a packed quantized format is an error, never replaced by the embedding.
"""

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loguru import logger
from transformers import PretrainedConfig

from speculators.utils.text_config import (
    config_from_dict,
    get_text_config,
    load_config_dict,
    load_text_config,
    text_config_dict,
    ties_word_embeddings,
)
from speculators.utils.verifier_weights.files import TensorHeaders, read_weight_index
from speculators.utils.verifier_weights.naming import (
    EMBED_NAMES,
    FLOAT_DTYPES,
    HEAD_NAMES,
    NORM_NAMES,
    OVERRIDE_HINT,
    PACKED_SUFFIXES,
)
from speculators.utils.verifier_weights.prefix import (
    ancestors,
    find_decoder_prefix,
    join_key,
    nearest,
)
from speculators.utils.verifier_weights.spec import (
    TensorInfo,
    VerifierWeightsError,
    VerifierWeightSpec,
)

__all__ = ["resolve_verifier_weights"]


def _int(config: PretrainedConfig, name: str) -> int | None:
    value = getattr(config, name, None)
    return value if isinstance(value, int) else None


def _load_configs(
    name_or_path: str | Path,
    text_config: PretrainedConfig | None,
    trust_remote_code: bool,
    revision: str | None,
) -> tuple[PretrainedConfig, bool, str]:
    """The text config, whether the head is tied, and the advice on bad shapes."""
    config_dict = load_config_dict(name_or_path, revision=revision)
    if text_config is None:
        if trust_remote_code:
            text_config = load_text_config(
                name_or_path, trust_remote_code=True, revision=revision
            )
        else:
            text_config = get_text_config(config_from_dict(config_dict))
    tied = getattr(text_config, "tie_word_embeddings", None)
    if tied is None:
        tied = ties_word_embeddings(config_dict)
    return text_config, bool(tied), _shape_hint(config_dict, text_config)


def _shape_hint(config_dict: dict[str, Any], text_config: PretrainedConfig) -> str:
    """The advice for weights that contradict the text config's sizes.

    When ``config.json`` does not set a size, the config class's default stands in
    for it; the weights are then right and the default is what to fix.
    """
    raw = text_config_dict(config_dict)
    unset = [
        f"{name} (so {type(text_config).__name__}'s default "
        f"{getattr(text_config, name)} was used)"
        for name in ("vocab_size", "hidden_size", "num_hidden_layers")
        if name not in raw and getattr(text_config, name, None) is not None
    ]
    if not unset:
        return OVERRIDE_HINT
    return (
        f"Its config.json does not set {' nor '.join(unset)}: add the value the "
        "weights have to the text config in config.json."
    )


def _overridden(what: str, key: str, flag: str, headers: TensorHeaders) -> TensorInfo:
    """The tensor an override names, or an error listing keys of a similar name."""
    if key in headers.weight_map:
        return headers.info(key)
    leaf = key.rsplit(".", 2)[-2] if "." in key else key
    similar = sorted(k for k in headers.weight_map if f".{leaf}." in f".{k}")[:10]
    raise VerifierWeightsError(
        f"{flag} names '{key}' as the verifier {what}, but the checkpoint has no "
        f"such tensor. Keys with a similar name: {similar or 'none'}."
    )


def _check_shape(
    info: TensorInfo,
    expected: tuple[int, ...],
    what: str,
    source: str,
    hint: str = OVERRIDE_HINT,
) -> None:
    if tuple(info.shape) != expected:
        advice = (
            "Check that the text config matches the weights, or name the right "
            f"tensor. {hint}"
            if hint == OVERRIDE_HINT
            else hint
        )
        raise VerifierWeightsError(
            f"The verifier {what} {info.describe()} of {source} contradicts the "
            f"text config, which implies shape {list(expected)}. {advice}"
        )


def _pick(
    found: list[str], headers: TensorHeaders, what: str, source: str
) -> TensorInfo | None:
    if not found:
        return None
    if len(found) > 1:
        listed = "; ".join(headers.info(key).describe() for key in found)
        raise VerifierWeightsError(
            f"Ambiguous verifier {what} in {source}: {listed}. {OVERRIDE_HINT}"
        )
    return headers.info(found[0])


def _packed_heads(weight_map: Mapping[str, str], scopes: list[str]) -> list[str]:
    return [
        key
        for scope in scopes
        for name in HEAD_NAMES
        for suffix in PACKED_SUFFIXES
        if (key := join_key(join_key(scope, name), suffix)) in weight_map
    ]


def _find_head(
    headers: TensorHeaders,
    scopes: list[str],
    embed: TensorInfo,
    tied_config: bool,
    source: str,
) -> tuple[TensorInfo, bool]:
    """The output head and whether it is the (tied) input embedding."""
    found, _ = nearest(headers.weight_map, scopes, HEAD_NAMES)
    head = _pick(found, headers, "output head", source)
    if head is not None:
        return head, False
    packed = _packed_heads(headers.weight_map, scopes)
    if packed:
        listed = "; ".join(headers.info(k).describe() for k in packed)
        raise VerifierWeightsError(
            f"The verifier output head of {source} is stored in a packed "
            f"quantized format ({listed}), which cannot be read; it is not "
            "replaced by the input embedding. Use an unquantized checkpoint of "
            "the same model, or pass --verifier-head-key."
        )
    if not tied_config:
        raise VerifierWeightsError(
            f"No output head ({'/'.join(HEAD_NAMES)}) found near prefix "
            f"'{scopes[0]}' of {source}, and its text config has "
            f"tie_word_embeddings=False. {OVERRIDE_HINT}"
        )
    return embed, True


def _check_head_dtype(head: TensorInfo) -> None:
    if head.dtype not in FLOAT_DTYPES:
        raise VerifierWeightsError(
            f"The verifier output head {head.describe()} is stored as {head.dtype}, "
            "a quantized format that cannot be read; it is not replaced by the "
            "input embedding."
        )


# Config fields counting a hyper-connection verifier's residual streams, and where
# its model mixes them back into one hidden state.
_HYPER_CONNECTION_STREAMS: dict[str, str] = {
    # DeepSeek-V4
    "hc_mult": (
        "only its hc_head mixes them into one, after the last layer, before the "
        "final norm and the output head (head.weight)"
    ),
    # Qwen4-Exp
    "hc_count": (
        "only its hyper_connection_mixer mixes them into one, after the last "
        "layer, with its own norm over all streams in place of a final norm, "
        "before the output head (lm_head.weight)"
    ),
}


def _hyper_connections(source: str, text_config: PretrainedConfig) -> str | None:
    """Why a hyper-connection verifier (DeepSeek-V4, Qwen4-Exp) cannot train an
    EAGLE-3 draft; ``None`` for a verifier with one residual stream."""
    model_type = getattr(text_config, "model_type", "?")
    for field_name, mixer in _HYPER_CONNECTION_STREAMS.items():
        streams = _int(text_config, field_name)
        if streams is None or streams <= 1:
            continue
        return (
            f"{source} ({model_type}) cannot be an EAGLE-3 verifier: each of its "
            f"layers carries {field_name}={streams} hyper-connection streams "
            f"instead of one hidden state, and {mixer}. An EAGLE-3 draft trains on "
            "one hidden state per aux layer and predicts through the verifier's "
            "final norm and head applied to one hidden state: this verifier has no "
            "such state to capture."
        )
    return None


def resolve_verifier_weights(  # noqa: C901
    name_or_path: str | Path,
    *,
    text_config: PretrainedConfig | None = None,
    prefix: str | None = None,
    embed_key: str | None = None,
    head_key: str | None = None,
    norm_key: str | None = None,
    need_norm: bool = True,
    trust_remote_code: bool = False,
    revision: str | None = None,
) -> VerifierWeightSpec:
    """Find the exact keys of the verifier's embedding, output head and final norm.

    Only the weight map and safetensors metadata are read (see module docstring).

    :param name_or_path: a local checkpoint directory or a Hub model id.
    :param text_config: the verifier's text config; read from ``config.json``
        (as data) when omitted.
    :param prefix: the decoder prefix, bypassing the prefix search.
    :param embed_key: the exact key of the input embedding.
    :param head_key: the exact key of the output head.
    :param norm_key: the exact key of the final norm weight.
    :param need_norm: whether a missing final norm is an error.
    :param trust_remote_code: load the config with the checkpoint's code.
    :param revision: the Hub revision.
    :return: the resolved keys, shapes, dtypes and shards.
    :raises VerifierWeightsError: on ambiguity, absence, contradicting shapes,
        unsupported formats, and missing or corrupt shards.
    """
    source = str(name_or_path)
    text_config, tied_config, shape_hint = _load_configs(
        name_or_path, text_config, trust_remote_code, revision
    )
    vocab = _int(text_config, "vocab_size")
    hidden = _int(text_config, "hidden_size")
    layers = _int(text_config, "num_hidden_layers")
    if vocab is None or hidden is None or layers is None:
        raise VerifierWeightsError(
            f"The text config of {source} lacks vocab_size / hidden_size / "
            "num_hidden_layers; cannot identify the verifier's weights."
        )
    refusal = _hyper_connections(source, text_config)
    if refusal is not None:
        raise VerifierWeightsError(refusal)
    weight_map = read_weight_index(name_or_path, revision)
    headers = TensorHeaders(name_or_path, weight_map, revision)
    expected = (vocab, hidden)

    if prefix is not None:
        prefix = prefix.strip(".")
        if prefix and not any(k.startswith(f"{prefix}.") for k in weight_map):
            raise VerifierWeightsError(
                f"--verifier-weight-prefix '{prefix}' matches no key of {source}."
            )
    elif embed_key is not None and embed_key in weight_map:
        # The embedding's module path anchors the search for head and norm.
        prefix = ".".join(embed_key.split(".")[:-2])
    elif embed_key is None:
        prefix = find_decoder_prefix(
            headers,
            layers=layers,
            extra_layers=_int(text_config, "num_nextn_predict_layers") or 0,
            expected=expected,
            source=source,
            hint=shape_hint,
        )
    scopes = ancestors(prefix) if prefix is not None else [""]

    if embed_key is not None:
        embed = _overridden(
            "input embedding", embed_key, "--verifier-embed-key", headers
        )
    else:
        found, _ = nearest(weight_map, scopes, EMBED_NAMES)
        picked = _pick(found, headers, "input embedding", source)
        if picked is None:
            raise VerifierWeightsError(
                f"No input embedding ({'/'.join(EMBED_NAMES)}) under prefix "
                f"'{prefix}' of {source}. {OVERRIDE_HINT}"
            )
        embed = picked
    _check_shape(embed, expected, "input embedding", source, shape_hint)
    if embed.dtype not in FLOAT_DTYPES:
        raise VerifierWeightsError(
            f"The verifier input embedding {embed.describe()} is not stored as "
            "float16/bfloat16/float32; quantized embeddings are not supported."
        )

    if head_key is not None:
        head = _overridden("output head", head_key, "--verifier-head-key", headers)
        tied = head.key == embed.key
    else:
        head, tied = _find_head(headers, scopes, embed, tied_config, source)
    _check_shape(head, expected, "output head", source, shape_hint)
    _check_head_dtype(head)

    norm: TensorInfo | None = None
    if norm_key is not None:
        norm = _overridden("final norm", norm_key, "--verifier-norm-key", headers)
    else:
        found, _ = nearest(weight_map, [prefix or ""], NORM_NAMES)
        norm = _pick(found, headers, "final norm", source)
    if norm is None and need_norm:
        raise VerifierWeightsError(
            f"No final norm ({'/'.join(NORM_NAMES)}) directly under prefix "
            f"'{prefix}' of {source}. {OVERRIDE_HINT}"
        )
    if norm is not None:
        _check_shape(norm, (hidden,), "final norm", source, shape_hint)

    shards = sorted({info.shard for info in (embed, head, norm) if info is not None})
    spec = VerifierWeightSpec(
        source=source,
        prefix=prefix,
        vocab_size=vocab,
        hidden_size=hidden,
        model_type=str(getattr(text_config, "model_type", "") or "").lower(),
        embed=embed,
        head=head,
        tied=tied,
        norm=norm,
        shards=shards,
        notes=["output head tied to the input embedding (text config)"]
        if tied and head_key is None
        else [],
    )
    logger.info(
        "Verifier weights of {}: prefix={!r} embed={!r} head={!r}{} norm={!r}",
        source,
        prefix,
        embed.key,
        head.key,
        " (tied)" if tied else "",
        norm.key if norm else None,
    )
    return spec
