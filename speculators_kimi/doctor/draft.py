"""The EAGLE-3 draft ``speculators train`` would build for a verifier: its decoder
config, the default target layer ids, and its norm and embedding options.

Everything is asked of ``speculators train``'s own code (``TrainConfig`` and
``create_transformer_layer_config``), from the draft flags the user chose
(:class:`DraftChoices`), so doctor and training never disagree.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

from .report import DECODER_FIELDS, Problem, Report

__all__ = ["DRAFT_FIELDS", "DraftChoices", "draft_options", "draft_section"]

#: The draft-config fields the report shows.
DRAFT_FIELDS = (
    *DECODER_FIELDS,
    "hidden_act",
    "rms_norm_eps",
    "max_position_embeddings",
)


@dataclass(frozen=True)
class DraftChoices:
    """The draft flags of ``speculators train`` that shape the draft; ``None``
    leaves a flag to training's default (which depends on ``arch``)."""

    #: ``--draft-arch``: llama, qwen3 or deepseek_v3 (MLA).
    arch: str = "llama"
    #: ``--num-layers``.
    num_layers: int = 1
    #: ``--norm-before-fc`` / ``--no-norm-before-fc``.
    norm_before_fc: bool | None = None
    #: ``--norm-output`` / ``--no-norm-output``.
    norm_output: bool | None = None
    #: ``--fc-norm``.
    fc_norm: bool = False


def draft_section(
    verifier: str,
    choices: DraftChoices,
    report: Report,
    *,
    draft_vocab: int,
    trust_remote_code: bool = False,
) -> tuple[Any, dict[str, Any]]:
    """The default target layer ids, the draft decoder config training builds
    and its norm and embedding options (training's settings resolved once);
    returns the config and the options."""
    from speculators.models.eagle3.model_definitions import MLA_FIELDS
    from speculators.models.utils import resolve_target_layer_ids
    from speculators.train.cli import (
        create_transformer_layer_config,
    )

    settings = _draft_settings(verifier, choices)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            report.target_layer_ids = resolve_target_layer_ids(
                None, verifier, trust_remote_code=trust_remote_code
            )
        except ValueError as err:
            report.problems.append(
                Problem(str(err), "Pass --target-layer-ids to training explicitly.")
            )
        draft = create_transformer_layer_config(
            verifier_name_or_path=verifier,
            num_layers=choices.num_layers,
            draft_arch=choices.arch,
            hidden_act=settings.draft_hidden_act,
            sliding_window=settings.sliding_window,
            full_attention_indices=list(settings.full_attention_indices),
            mrope_full_head_hack=settings.draft_mrope_full_head_hack,
            trust_remote_code=trust_remote_code,
        )
    # An MLA (``--draft-arch deepseek_v3``) draft shows its latent geometry too.
    mla = (*MLA_FIELDS, "rope_interleave", "rope_parameters")
    fields = DRAFT_FIELDS + (mla if choices.arch == "deepseek_v3" else ())
    options = _options_of(settings)
    report.draft_config = {name: getattr(draft, name, None) for name in fields}
    report.draft_config["draft_vocab_size"] = draft_vocab
    report.draft_config.update(options)
    return draft, options


def _draft_settings(verifier: str, choices: DraftChoices) -> Any:
    """``speculators train``'s draft settings for these flags: its own defaults
    for the rest (``--draft-hidden-act``, ``--sliding-window``, ...)."""
    from speculators.train.config import TrainConfig

    argv = ["--verifier-name-or-path", verifier, "--data-path", "unused"]
    argv += ["--draft-arch", choices.arch, "--num-layers", str(choices.num_layers)]
    for flag, value in (
        ("norm_before_fc", choices.norm_before_fc),
        ("norm_output", choices.norm_output),
    ):
        if value is not None:
            argv.append(f"--{'' if value else 'no-'}{flag.replace('_', '-')}")
    if choices.fc_norm:
        argv.append("--fc-norm")
    return TrainConfig.resolve(argv).draft


def draft_options(verifier: str, choices: DraftChoices) -> dict[str, Any]:
    """The draft's norm and embedding options as ``speculators train`` resolves
    them from the same flags (its own defaults, e.g. no ``--norm-before-fc`` for
    an MLA draft)."""
    return _options_of(_draft_settings(verifier, choices))


def _options_of(settings: Any) -> dict[str, Any]:
    return {
        name: getattr(settings, name)
        for name in (
            "norm_before_residual",
            "norm_before_fc",
            "fc_norm",
            "norm_output",
            "embed_requires_grad",
        )
    }
