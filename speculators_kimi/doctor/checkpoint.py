"""What the verifier checkpoint says, read without tensor data: the resolved text
config (and any quantization), the exact embedding / head / final-norm keys
training would use, and whether every shard of the weight map is there and whole.

Each section fills its part of a :class:`~.report.Report`. The logic lives in
the patched ``speculators`` (``speculators.utils.text_config`` and
``speculators.utils.verifier_weights``) and in :mod:`speculators_kimi.verifier`;
it is imported when a section runs, so ``--help`` stays fast.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..served_verifiers import aux_states_note
from .report import DECODER_FIELDS, Problem, Report

__all__ = [
    "TEXT_FIELDS",
    "shards_section",
    "text_config_section",
    "weights_section",
]

#: The text-config fields the report shows.
TEXT_FIELDS = (
    *DECODER_FIELDS,
    "tie_word_embeddings",
    "kv_lora_rank",
    "v_head_dim",
    "num_nextn_predict_layers",
)


def _find_path(node: Any, target: Any, prefix: str = "") -> str | None:
    """Dotted path of ``target`` (by identity) inside a nested config dict."""
    if node is target:
        return prefix or "(top level)"
    if isinstance(node, dict):
        for key, child in node.items():
            found = _find_path(child, target, f"{prefix}.{key}" if prefix else key)
            if found is not None:
                return found
    return None


def _is_hybrid(text_config: Any) -> bool | None:
    """Whether the verifier has linear-attention or Mamba layers beside attention
    (the cache transformers builds from its config holds recurrent state); None
    where transformers cannot build that cache from the config."""
    from speculators_kimi.verifier.cache import hybrid_cache

    try:
        return hybrid_cache(text_config) is not None
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def _logit_transform(text_config: Any) -> str | None:
    """What the verifier does to its logits after the head (a softcap, a scale),
    in words; ``None`` when nothing. Training's targets and evaluate apply it."""
    from speculators.models.verifier_logits import resolve_logit_transform

    transform = resolve_logit_transform(text_config)
    return None if transform.is_identity else str(transform)


def text_config_section(verifier: str, trust_remote_code: bool, report: Report) -> Any:
    """The text config training resolves, where it was found, and any
    quantization the config declares; returns the text config for the sections
    after it."""
    from speculators.utils.text_config import (
        load_config_dict,
        load_text_config,
        text_config_dict,
        ties_word_embeddings,
    )

    config_dict = load_config_dict(verifier)
    text_dict = text_config_dict(config_dict)
    text_config = load_text_config(verifier, trust_remote_code=trust_remote_code)
    section = {name: getattr(text_config, name, None) for name in TEXT_FIELDS}
    section["found_at"] = _find_path(config_dict, text_dict)
    section["config_file"] = str(
        Path(verifier) / "config.json" if Path(verifier).is_dir() else verifier
    )
    section["tie_word_embeddings"] = ties_word_embeddings(config_dict)
    section["hybrid"] = _is_hybrid(text_config)
    section["logit_transform"] = _logit_transform(text_config)
    architectures = [str(a) for a in config_dict.get("architectures") or []]
    section["architectures"] = architectures
    section["vllm_aux_states"] = aux_states_note(architectures)
    report.text_config = section
    for where, node in (("text config", text_dict), ("config", config_dict)):
        quant = node.get("quantization_config") if isinstance(node, dict) else None
        if quant:
            method = quant.get("quant_method", "?")
            fmt = quant.get("format") or quant.get("fmt") or ""
            report.quantization.append(f"{where}: {method} {fmt}".strip())
    return text_config


def decoder_section(
    text_config: Any, trust_remote_code: bool, report: Report, weights: Any
) -> None:
    """Whether ``transformers`` has a class for the text decoder, and whether
    its layer list and final norm (``weights``' norm, when resolved) are there
    to hook: ``generate-hidden-states`` and ``evaluate`` need both (training
    reads hidden states and needs neither)."""
    from ..verifier.capture import UnsupportedDecoderError, decoder_parts
    from ..verifier.loading import meta_decoder
    from ..verifier.resolved import final_norm_path

    try:
        decoder = meta_decoder(text_config, trust_remote_code=trust_remote_code)
    except (TypeError, ValueError, ImportError) as err:
        model_type = getattr(text_config, "model_type", "") or ""
        if not model_type:
            fix = (
                "Its config.json (or text config) has no model_type: give the "
                "transformers model type it was written for."
            )
        elif getattr(text_config, "auto_map", None) and not trust_remote_code:
            fix = "Its config names its own code: pass --trust-remote-code."
        else:
            fix = "Install a transformers that knows this model type."
        report.problems.append(
            Problem(
                "generate-hidden-states and evaluate cannot load its text decoder: "
                f"transformers has no model class for model_type {model_type!r} "
                f"({type(err).__name__}).",
                fix,
            )
        )
        return
    if weights is None:  # the weight keys' problem is reported already
        return
    try:
        decoder_parts(decoder, final_norm_path(weights))
    except UnsupportedDecoderError as err:
        report.problems.append(
            Problem(
                f"generate-hidden-states and evaluate cannot read its hidden states: "
                f"{err}.",
                "Name the norm applied after the last layer with "
                "--verifier-norm-key; a decoder without one layer list cannot be "
                "read here: train on hidden states vLLM extracts (`speculators "
                "launch-vllm`), where vLLM serves it.",
            )
        )


def weights_section(
    verifier: str,
    text_config: Any,
    report: Report,
    overrides: Mapping[str, str | None],
) -> Any:
    """The weight keys training would use (``overrides``: the ``--verifier-*``
    flags as ``resolve_verifier_weights`` keywords); returns the weight spec."""
    from speculators.utils.verifier_weights import resolve_verifier_weights

    spec = resolve_verifier_weights(verifier, text_config=text_config, **overrides)
    report.weights = json.loads(json.dumps(dataclasses.asdict(spec)))
    # The flags that pin this resolution (train and generate-hidden-states).
    report.weights["overrides"] = {
        "verifier_weight_prefix": spec.prefix,
        "verifier_embed_key": spec.embed.key,
        "verifier_head_key": spec.head.key,
        "verifier_norm_key": spec.norm.key if spec.norm else None,
    }
    if spec.quantization:
        report.quantization.append(f"output head: {spec.quantization}")
    return spec


def shards_section(verifier: str, report: Report) -> None:
    """Each shard a local checkpoint's weight map names exists and is as long as
    its header says (:mod:`speculators_kimi.verifier.shards`, the check the
    commands that load the verifier make; no tensor is read).

    The embedding, head and norm shards are read by the weights section; a
    missing or torn layer shard would otherwise only fail the next command."""
    from speculators.utils.verifier_weights.files import is_local

    from ..verifier.shards import check_shards

    if not is_local(verifier):
        return
    checks = check_shards(verifier)
    report.shards = []
    for check in checks:
        report.shards.append(
            {"shard": check.shard, "tensors": len(check.keys), "ok": check.ok}
        )
        if not check.ok:
            report.problems.append(
                Problem(
                    f"{check.problem()}.",
                    "Re-download the checkpoint (or this shard) and run doctor again.",
                )
            )
