"""Every doctor check in order, on one verifier: :func:`diagnose` takes
:class:`DoctorOptions` and returns a :class:`~.report.Report`.

A bad verifier never raises: each section's error becomes a
:class:`~.report.Problem` with its fix, and the sections that can still run do.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ..served import BLOCK_ALGORITHMS
from .checkpoint import (
    decoder_section,
    shards_section,
    text_config_section,
    weights_section,
)
from .data import hidden_states_section, prepared_data_refusal
from .draft import (
    DraftChoices,
    aux_layers,
    draft_section,
    draft_vocab_of,
    planned_draft,
    train_config,
)
from .memory import estimate_block_memory, estimate_memory, planned_params
from .report import Problem, Report
from .serving import serving_section, training_refusal
from .tokenizer import tokenizer_section
from .values import values_section

__all__ = ["DoctorOptions", "diagnose"]


@dataclass(frozen=True)
class DoctorOptions:
    """What to check and the training choices to check it for (the ``doctor``
    flags, as the library takes them)."""

    #: Load the config with the checkpoint's code (default: read it as data).
    trust_remote_code: bool = False
    #: Also read the tensors the draft takes and report NaN/inf in them.
    check_values: bool = False
    #: Draft vocabulary of the estimate; ``None``: the verifier's, as training
    #: without ``--draft-vocab-size``.
    draft_vocab_size: int | None = None
    #: The draft ``speculators train`` would build.
    draft: DraftChoices = field(default_factory=DraftChoices)
    #: ``resolve_verifier_weights`` keywords (``prefix``, ``embed_key``,
    #: ``head_key``, ``norm_key``), as the ``--verifier-*`` flags give them.
    weight_overrides: Mapping[str, str | None] | None = None


def _problem_for(err: Exception) -> Problem:
    """A section's error as a problem, with the fix for its kind."""
    from speculators.utils.text_config import (
        AmbiguousTextConfigError,
    )
    from speculators.utils.verifier_weights import (
        VerifierWeightsError,
    )

    text = str(err)
    if isinstance(err, AmbiguousTextConfigError):
        return Problem(text, "Pick the text sub-config (see the candidates above).")
    if isinstance(err, VerifierWeightsError):
        fix = (
            "Follow the message: pass --verifier-weight-prefix / "
            "--verifier-embed-key / --verifier-head-key / --verifier-norm-key, or "
            "repair/re-download the checkpoint."
        )
        if "cannot be an EAGLE-3 verifier" in text:  # several streams per layer
            fix = (
                "No flag fixes this: this verifier cannot train an EAGLE-3 draft. "
                "Use a speculative method its serving engine supports for it, such "
                "as its own MTP layers where its config has num_nextn_predict_layers."
            )
        elif "No safetensors weights" in text:
            fix = (
                "Give a checkpoint with safetensors weights (training reads no "
                "pytorch_model.bin): download the repository's .safetensors files, "
                "or load it with transformers and save_pretrained it (safetensors "
                "by default)."
            )
        elif "packed" in text or "quantized" in text:
            fix = "Use an unquantized or FP8 block-scaled checkpoint of the model."
        elif "missing" in text or "Corrupt" in text or "Truncated" in text:
            fix = "Re-download the checkpoint (a shard is missing or damaged)."
        return Problem(text, fix)
    if isinstance(err, FileNotFoundError | OSError):
        return Problem(
            f"Cannot read the verifier: {text}",
            "Check the path / Hub id and that config.json and weights are present.",
        )
    return Problem(f"{type(err).__name__}: {text}", "See the message.")


def _shards_and_weights(
    verifier: str, text_config: Any, options: DoctorOptions, report: Report
) -> Any:
    """Every shard, then the weight keys; returns the weight spec, or ``None``
    when the keys cannot be resolved."""
    try:
        shards_section(verifier, report)
    except Exception as err:
        report.problems.append(_problem_for(err))
    bad_shards = [r["shard"] for r in report.shards or [] if not r["ok"]]
    try:
        return weights_section(
            verifier, text_config, report, options.weight_overrides or {}
        )
    except Exception as err:
        # A shard reported above is not reported twice (nor a single file
        # whose header neither section could read).
        problem = _problem_for(err)
        reported = problem in report.problems
        if not reported and not any(shard in str(err) for shard in bad_shards):
            report.problems.append(problem)
    return None


def _cannot_build(err: Exception) -> Problem:
    """A config without a field the draft copies: a verifier without attention
    layers (Mamba, RWKV) has no num_attention_heads, an ALiBi one (Bloom) no
    context length."""
    return Problem(
        "speculators train cannot build its default draft from this "
        f"verifier's config: {str(err).rstrip('.')}.",
        "Give speculators train --draft-config, a decoder config for the "
        "draft (its model_type, attention heads and "
        "max_position_embeddings; the verifier's hidden_size).",
    )


def _resolved_flags(
    verifier: str, text_config: Any, options: DoctorOptions, report: Report
) -> tuple[Any, int] | None:
    """The flags as training resolves them and its draft vocabulary, once
    nothing training refuses before any work is found (else ``None``, and the
    problem reported)."""
    from speculators.train.config.resolution import ConfigError

    try:
        cfg, notes = train_config(
            verifier,
            options.draft,
            draft_vocab_size=options.draft_vocab_size,
            trust_remote_code=options.trust_remote_code,
        )
    except ConfigError as err:
        report.problems.append(
            Problem(
                f"speculators train refuses these flags: {err}",
                "Fix the flags (those after -- go to train's parser as given).",
            )
        )
        return None
    draft_vocab = draft_vocab_of(cfg, int(text_config.vocab_size))
    report.training = {
        "speculator_type": cfg.speculator_type,
        "train_flags": list(options.draft.train_flags),
        "notes": notes,
    }
    if draft_vocab > int(text_config.vocab_size):
        report.problems.append(
            Problem(
                f"--draft-vocab-size {draft_vocab} exceeds the verifier "
                f"vocabulary ({text_config.vocab_size}).",
                "Choose a draft vocabulary no larger than the verifier's.",
            )
        )
        return None
    refusal = training_refusal(cfg) or prepared_data_refusal(cfg)
    if refusal is not None:
        report.problems.append(refusal)
        return None
    try:
        report.target_layer_ids = _target_layer_ids(verifier, cfg, options)
    except ValueError as err:
        report.problems.append(
            Problem(str(err), "Pass --target-layer-ids to training explicitly.")
        )
        return None
    return cfg, draft_vocab


def _training_plan(
    verifier: str,
    text_config: Any,
    options: DoctorOptions,
    report: Report,
) -> None:
    """The flags as training resolves them, what it refuses before any work,
    the draft it would build, its memory estimate, how vLLM serves it and the
    data it would train on."""
    from speculators.train.config.resolution import ConfigError

    resolved = _resolved_flags(verifier, text_config, options, report)
    if resolved is None:
        return
    cfg, draft_vocab = resolved
    try:
        planned, unresolved = planned_draft(
            cfg,
            draft_vocab,
            int(text_config.vocab_size),
            read_tokenizer=Path(verifier).is_dir(),
        )
        chosen = draft_section(
            cfg, planned, report, draft_vocab=draft_vocab, mask_known=not unresolved
        )
        if unresolved is not None and report.training is not None:
            report.training["notes"].append(unresolved)
    except (AttributeError, ConfigError) as err:
        report.problems.append(_cannot_build(err))
        return
    except Exception as err:
        report.problems.append(_problem_for(err))
        return
    try:
        report.memory = _memory(cfg, planned, chosen, draft_vocab)
        if int(planned.transformer_layer_config.hidden_size) != int(
            text_config.hidden_size
        ):
            report.problems.append(
                Problem(
                    "Draft hidden_size differs from the verifier's.",
                    "Use a draft config with the verifier's hidden_size.",
                )
            )
    except Exception as err:
        report.problems.append(_problem_for(err))
    serving_section(verifier, planned, report)
    hidden_states_section(cfg, planned, report)


def _target_layer_ids(verifier: str, cfg: Any, options: DoctorOptions) -> list[int]:
    """The verifier layers the draft reads (``--target-layer-ids``, else
    training's default for the verifier).

    :raises ValueError: training cannot choose them for this verifier.
    """
    from speculators.models.utils import resolve_target_layer_ids

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ids = resolve_target_layer_ids(
            cfg.flatten()["target_layer_ids"],
            verifier,
            trust_remote_code=options.trust_remote_code,
        )
    return [int(i) for i in ids]


def _memory(
    cfg: Any, planned: Any, chosen: dict[str, Any], draft_vocab: int
) -> dict[str, Any] | None:
    """The estimate for the algorithm: EAGLE-3's test-time training or a block
    drafter's anchored blocks; none for P-EAGLE and MTP (vLLM serves neither)."""
    flat = cfg.flatten()
    if cfg.speculator_type == "eagle3":
        return estimate_memory(
            planned.transformer_layer_config,
            draft_vocab=draft_vocab,
            options=chosen,
            num_aux=len(aux_layers(planned) or ()),
            seq_len=int(flat["total_seq_len"]),
            ttt_steps=int(flat["ttt_steps"]),
            params=planned_params(planned),
        )
    if cfg.speculator_type in BLOCK_ALGORITHMS:
        return estimate_block_memory(
            planned,
            draft_vocab=draft_vocab,
            seq_len=int(flat["total_seq_len"]),
            max_anchors=int(flat["max_anchors"]),
        )
    return None


def diagnose(
    verifier: str,
    options: DoctorOptions | None = None,
    *,
    progress: TextIO | None = None,
) -> Report:
    """Run every check; never raises for a bad verifier (problems are reported).

    :param verifier: a local checkpoint directory or a Hub id.
    :param options: what to check, and for which draft (default: doctor's).
    :param progress: a text stream that gets a line per tensor ``check_values``
        reads (default: none).
    """
    from speculators.utils.cli_errors import check_model_source

    options = options or DoctorOptions()
    report = Report(verifier=verifier)
    try:
        check_model_source(verifier, "verifier")
    except ValueError as err:
        report.problems.append(
            Problem(str(err), "Give an existing checkpoint directory or a Hub id.")
        )
        return report
    try:
        text_config = text_config_section(verifier, options.trust_remote_code, report)
    except Exception as err:
        report.problems.append(_problem_for(err))
        return report
    tokenizer_section(verifier, report)
    spec = _shards_and_weights(verifier, text_config, options, report)
    decoder_section(text_config, options.trust_remote_code, report, spec)
    if options.check_values and spec is not None:
        values_section(spec, report, progress=progress)
    _training_plan(verifier, text_config, options, report)
    return report
