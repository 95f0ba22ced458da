"""Resolve a verifier's text (language-model) config, however it is nested.

Verifiers come as flat decoder configs (Llama, DeepSeek-V3), as composite configs
that transformers knows (``text_config`` on Gemma-3, Llama-4, Qwen2.5-VL,
Kimi-K2.5; ``thinker_config.text_config`` on Qwen2.5-Omni / Qwen3-Omni), and as
remote-code wrappers that transformers does not know (``llm_config`` on
InternVL-chat, ``language_config`` on DeepSeek-VL2). Everything that needs the
verifier's sizes (hidden size, vocabulary, layer count, attention geometry, word
embedding tying) goes through :func:`load_text_config` / :func:`get_text_config`.

Reading sizes never requires executing checkpoint code: unless
``trust_remote_code=True``, ``config.json`` is read as data and the text config is
built from the nested dict and its ``model_type`` (see :data:`MODEL_TYPE_ALIASES`).
"""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from huggingface_hub import hf_hub_download
from transformers import AutoConfig, PretrainedConfig
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

__all__ = [
    "MODEL_TYPE_ALIASES",
    "TEXT_CONFIG_REQUIRED_KEYS",
    "TEXT_SUB_CONFIG_NAMES",
    "AmbiguousTextConfigError",
    "config_from_dict",
    "get_text_config",
    "load_config_dict",
    "load_text_config",
    "resolve_attention_head_dim",
    "resolve_max_position_embeddings",
    "resolve_norm_eps",
    "resolve_num_key_value_heads",
    "text_config_dict",
    "ties_word_embeddings",
]

# Sub-config names, in priority order, under which composite configs keep their
# language model and that ``PretrainedConfig.get_text_config`` does not search.
# ``thinker_config`` (Qwen2.5-Omni / Qwen3-Omni) nests the text config one level
# deeper; resolution recurses into it.
TEXT_SUB_CONFIG_NAMES: tuple[str, ...] = (
    "text_config",
    "llm_config",
    "language_config",
    "language_model_config",
    "thinker_config",
)

# The keys a config must carry to be a candidate text (decoder) config.
TEXT_CONFIG_REQUIRED_KEYS: tuple[str, ...] = (
    "hidden_size",
    "vocab_size",
    "num_hidden_layers",
)

# Remote-code ``model_type`` values whose config is equivalent to a config class
# that transformers ships (transformers' own Kimi-K2.5 config maps ``kimi_k2`` to
# ``deepseek_v3`` the same way).
MODEL_TYPE_ALIASES: dict[str, str] = {
    "kimi_k2": "deepseek_v3",
}

_MAX_SEARCH_DEPTH = 4


class AmbiguousTextConfigError(ValueError):
    """Raised when several sub-configs could be the verifier's text config."""


def _canonical_model_type(model_type: Any) -> str | None:
    if not isinstance(model_type, str) or not model_type:
        return None
    return MODEL_TYPE_ALIASES.get(model_type, model_type)


def config_from_dict(config_dict: dict[str, Any]) -> PretrainedConfig:
    """Build a config object from a ``config.json``-style dict without running code.

    The config class is the one transformers ships for the dict's ``model_type``
    (after :data:`MODEL_TYPE_ALIASES`); an unknown ``model_type`` gives a plain
    :class:`~transformers.PretrainedConfig` carrying the dict's keys, whose nested
    sub-configs stay dicts. ``auto_map`` is never followed.

    :param config_dict: the parsed config, e.g. the content of ``config.json``.
    :return: the config object.
    """
    model_type = _canonical_model_type(config_dict.get("model_type"))
    if model_type is not None and model_type in CONFIG_MAPPING:
        values = dict(config_dict)
        values["model_type"] = model_type
        return CONFIG_MAPPING[model_type].from_dict(values)
    return PretrainedConfig.from_dict(dict(config_dict))


def load_config_dict(
    name_or_path: str | Path,
    *,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Read a model's ``config.json`` as data, without executing any code.

    :param name_or_path: a local model directory, a path to a config JSON file, or
        a Hugging Face Hub model id.
    :param revision: the Hub revision (branch, tag or commit) to read.
    :param cache_dir: the Hugging Face cache directory to use for Hub downloads.
    :return: the parsed ``config.json``.
    """
    path = Path(name_or_path)
    if path.is_dir():
        config_file = path / "config.json"
    elif path.is_file():
        config_file = path
    else:
        config_file = Path(
            hf_hub_download(
                repo_id=str(name_or_path),
                filename="config.json",
                revision=revision,
                cache_dir=cache_dir,
            )
        )
    with config_file.open() as file:
        config_dict = json.load(file)
    if not isinstance(config_dict, dict):
        raise ValueError(f"{config_file} does not hold a JSON object.")
    # JSON has no Infinity or NaN: transformers writes them as
    # {"__float__": "Infinity"} (Nemotron-H's time_step_limit) and decodes them
    # when it reads a config, as we do here.
    decode = getattr(PretrainedConfig, "_decode_special_floats", None)
    return decode(config_dict) if decode is not None else config_dict


def _get(node: PretrainedConfig | dict[str, Any], key: str) -> Any:
    if isinstance(node, dict):
        return node.get(key)
    return getattr(node, key, None)


def _is_text_candidate(node: PretrainedConfig | dict[str, Any]) -> bool:
    return all(_get(node, key) is not None for key in TEXT_CONFIG_REQUIRED_KEYS)


def _children(
    node: PretrainedConfig | dict[str, Any],
) -> Iterator[tuple[str, PretrainedConfig | dict[str, Any]]]:
    items = node.items() if isinstance(node, dict) else vars(node).items()
    for key, value in items:
        if isinstance(value, PretrainedConfig | dict) and not key.startswith("_"):
            yield key, value


def _structural_candidates(
    node: PretrainedConfig | dict[str, Any], prefix: str = "", depth: int = 0
) -> list[tuple[str, PretrainedConfig | dict[str, Any]]]:
    """Every nested sub-config with all of :data:`TEXT_CONFIG_REQUIRED_KEYS`."""
    found: list[tuple[str, PretrainedConfig | dict[str, Any]]] = []
    if depth >= _MAX_SEARCH_DEPTH:
        return found
    for key, child in _children(node):
        path = f"{prefix}{key}"
        if _is_text_candidate(child):
            found.append((path, child))
        else:
            found.extend(_structural_candidates(child, f"{path}.", depth + 1))
    return found


def _describe(path: str, node: PretrainedConfig | dict[str, Any]) -> str:
    sizes = ", ".join(f"{key}={_get(node, key)}" for key in TEXT_CONFIG_REQUIRED_KEYS)
    return f"'{path}' ({sizes})"


def _follow_path(
    config: PretrainedConfig | dict[str, Any], text_config_path: str
) -> PretrainedConfig | dict[str, Any]:
    node = config
    for key in text_config_path.split("."):
        child = _get(node, key)
        if not isinstance(child, PretrainedConfig | dict):
            raise ValueError(
                f"text_config_path '{text_config_path}' does not name a sub-config "
                f"(no sub-config '{key}')."
            )
        node = child
    return node


def _locate(
    config: PretrainedConfig | dict[str, Any], depth: int = 0
) -> PretrainedConfig | dict[str, Any]:
    """Find the text config node inside ``config`` (which may be a dict)."""
    if isinstance(config, PretrainedConfig):
        try:
            text = config.get_text_config(decoder=True)
        except ValueError:
            # Several of transformers' names are set; fall through to the search.
            text = config
        if text is not config and text is not None:
            return _locate(text, depth + 1) if depth < _MAX_SEARCH_DEPTH else text
    if depth < _MAX_SEARCH_DEPTH:
        for name in TEXT_SUB_CONFIG_NAMES:
            child = _get(config, name)
            if isinstance(child, PretrainedConfig) or (
                isinstance(child, dict) and child
            ):
                return _locate(child, depth + 1)
    if _is_text_candidate(config):
        return config
    candidates = _structural_candidates(config)
    if len(candidates) == 1:
        return candidates[0][1]
    if len(candidates) > 1:
        listed = "; ".join(_describe(path, node) for path, node in candidates)
        raise AmbiguousTextConfigError(
            f"Found {len(candidates)} sub-configs that could be the text "
            f"(language-model) config: {listed}. Choose one by passing "
            "text_config_path='<path>' (e.g. "
            f"text_config_path='{candidates[0][0]}')."
        )
    # Nothing better than the config itself (upstream behavior for flat configs).
    return config


def _as_config(node: PretrainedConfig | dict[str, Any]) -> PretrainedConfig:
    if isinstance(node, dict):
        return config_from_dict(node)
    model_type = getattr(node, "model_type", None)
    canonical = _canonical_model_type(model_type)
    if (
        isinstance(model_type, str)
        and model_type in MODEL_TYPE_ALIASES
        and canonical is not None
        and canonical in CONFIG_MAPPING
        and not isinstance(node, CONFIG_MAPPING[canonical])
    ):
        # A remote-code class for a config transformers ships under another name.
        return config_from_dict(node.to_dict())
    return node


def get_text_config(
    config: PretrainedConfig | dict[str, Any],
    text_config_path: str | None = None,
) -> PretrainedConfig:
    """Return the text (language-model decoder) config of a model config.

    Resolution order: ``text_config_path`` when given;
    ``config.get_text_config(decoder=True)``; the sub-configs named in
    :data:`TEXT_SUB_CONFIG_NAMES` (recursively, e.g.
    ``thinker_config.text_config``); the config itself when it carries
    :data:`TEXT_CONFIG_REQUIRED_KEYS`; else the single nested sub-config that
    carries them. A sub-config stored as a dict (remote-code wrappers) is built
    with :func:`config_from_dict`, so no code is executed.

    :param config: a loaded config, or a ``config.json``-style dict.
    :param text_config_path: dotted path of the text sub-config (e.g.
        ``"thinker_config.text_config"``), to bypass the search.
    :return: the text config; ``config`` itself for flat decoder configs.
    :raises AmbiguousTextConfigError: when several nested sub-configs qualify.
    """
    if isinstance(config, dict):
        config = config_from_dict(config)
    if text_config_path:
        node = _follow_path(config, text_config_path)
    else:
        node = _locate(config)
    return _as_config(node)


def text_config_dict(
    config_dict: dict[str, Any], text_config_path: str | None = None
) -> dict[str, Any]:
    """Return the text-config part of a ``config.json``-style dict, as a dict.

    Same resolution as :func:`get_text_config`, on raw dicts (for converters that
    work on ``config.json`` content). Flat configs are returned unchanged.

    :param config_dict: the parsed config.
    :param text_config_path: dotted path of the text sub-config, to bypass the
        search.
    :return: the nested dict holding the text config.
    :raises AmbiguousTextConfigError: when several nested sub-configs qualify.
    """
    node = (
        _follow_path(config_dict, text_config_path)
        if text_config_path
        else _locate(config_dict)
    )
    return node if isinstance(node, dict) else node.to_dict()


def load_text_config(
    name_or_path: str | Path,
    *,
    trust_remote_code: bool = False,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
    text_config_path: str | None = None,
) -> PretrainedConfig:
    """Load a model's text (language-model decoder) config.

    With ``trust_remote_code=False`` (the default) ``config.json`` is read as data
    (:func:`load_config_dict`) and built with the config classes transformers
    ships (:func:`config_from_dict`); no file of the checkpoint is imported, so
    sizes and attention geometry are known even for remote-code models. With
    ``trust_remote_code=True`` the config is loaded through ``AutoConfig`` and may
    run the checkpoint's ``configuration_*.py``.

    :param name_or_path: a local model directory, a config JSON file, or a Hugging
        Face Hub model id.
    :param trust_remote_code: allow executing the checkpoint's configuration code.
    :param revision: the Hub revision to read.
    :param cache_dir: the Hugging Face cache directory.
    :param text_config_path: dotted path of the text sub-config, to bypass the
        search (see :func:`get_text_config`).
    :return: the text config.
    :raises AmbiguousTextConfigError: when several nested sub-configs qualify.
    """
    config: PretrainedConfig
    if trust_remote_code:
        config = AutoConfig.from_pretrained(
            str(name_or_path),
            trust_remote_code=True,
            revision=revision,
            cache_dir=cache_dir,
        )
    else:
        config = config_from_dict(
            load_config_dict(name_or_path, revision=revision, cache_dir=cache_dir)
        )
    return get_text_config(config, text_config_path)


def resolve_attention_head_dim(text_config: PretrainedConfig) -> int | None:
    """The per-head dimension a standard-attention draft should inherit.

    For multi-head latent attention (MLA; configs with ``kv_lora_rank`` such as
    DeepSeek-V3 and Kimi-K2.5) transformers' ``head_dim`` is the rotary part of
    the query/key head (``qk_rope_head_dim``), not a head size; the value head
    size ``v_head_dim`` is the per-head width of the attention output and is used
    instead.

    :param text_config: the verifier's text config.
    :return: the head dimension, or None when the config does not define one.
    """
    if getattr(text_config, "kv_lora_rank", None) is not None:
        v_head_dim = getattr(text_config, "v_head_dim", None)
        if v_head_dim:
            return int(v_head_dim)
    head_dim = getattr(text_config, "head_dim", None)
    return int(head_dim) if head_dim else None


def resolve_num_key_value_heads(text_config: PretrainedConfig) -> int:
    """The number of key/value heads of the verifier's attention.

    ``num_key_value_heads`` where the config has it; Falcon-style configs name it
    ``num_kv_heads`` (or set ``multi_query``); configs without either (GPT-NeoX,
    GPT-2) use multi-head attention, one key/value head per query head.

    :param text_config: the verifier's text config.
    :return: the key/value head count.
    """
    value = getattr(text_config, "num_key_value_heads", None)
    if value:
        return int(value)
    if getattr(text_config, "multi_query", False) and not getattr(
        text_config, "new_decoder_architecture", False
    ):
        return 1
    value = getattr(text_config, "num_kv_heads", None)
    if value:
        return int(value)
    return int(text_config.num_attention_heads)


#: Names configs give their context length, in lookup order (MPT: ``max_seq_len``;
#: GPT-2 family: ``n_positions``/``n_ctx``; ChatGLM: ``seq_length``).
CONTEXT_LENGTH_NAMES: tuple[str, ...] = (
    "max_position_embeddings",
    "max_seq_len",
    "n_positions",
    "seq_length",
    "max_sequence_length",
    "max_seq_length",
    "n_ctx",
)


def resolve_max_position_embeddings(text_config: PretrainedConfig) -> int:
    """The verifier's context length, whatever its config calls it.

    :param text_config: the verifier's text config.
    :return: the first of :data:`CONTEXT_LENGTH_NAMES` that is set.
    :raises ValueError: if the config names no context length.
    """
    for name in CONTEXT_LENGTH_NAMES:
        value = getattr(text_config, name, None)
        if value:
            return int(value)
    raise ValueError(
        f"{type(text_config).__name__} names no context length (looked for "
        f"{', '.join(CONTEXT_LENGTH_NAMES)}); set max_position_embeddings in the "
        "draft config (--draft-config)."
    )


def resolve_norm_eps(text_config: PretrainedConfig, default: float = 1e-6) -> float:
    """The epsilon of the verifier's normalisation layers, whatever its name.

    :param text_config: the verifier's text config.
    :param default: the value when the config names none.
    :return: ``rms_norm_eps``, ``layer_norm_eps``, ``layer_norm_epsilon``,
        ``norm_epsilon`` or ``norm_eps`` (Nemotron-4, LFM2), the first that is set.
    """
    for name in (
        "rms_norm_eps",
        "layer_norm_eps",
        "layer_norm_epsilon",
        "norm_epsilon",
        "norm_eps",
    ):
        value = getattr(text_config, name, None)
        if value is not None:
            return float(value)
    return default


def ties_word_embeddings(config: PretrainedConfig | dict[str, Any]) -> bool:
    """Whether the text model's output head is tied to its input embeddings.

    Read from the text config, not the wrapper: e.g. transformers' Kimi-K2.5
    wrapper defaults ``tie_word_embeddings`` to True while its DeepSeek-V3 text
    config has False. Only when the text config leaves it unset (None) does the
    wrapper's value apply.

    :param config: a loaded config or a ``config.json``-style dict (wrapper or
        text config).
    :return: whether the output head is tied.
    """
    if isinstance(config, dict):
        config = config_from_dict(config)
    tied = getattr(get_text_config(config), "tie_word_embeddings", None)
    if tied is None:
        tied = getattr(config, "tie_word_embeddings", None)
    return bool(tied)
