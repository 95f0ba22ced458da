"""The draft ``speculators train`` would build for a verifier and the flags
given: its resolved training config (:func:`train_config`), the speculator
config it would save (:func:`planned_draft`), and the draft section of the
report.

Everything is asked of ``speculators train``'s own code (``TrainConfig`` and
``build_draft_model``, the algorithm's ``from_training_args``), from the flags
the user chose (:class:`DraftChoices`), so doctor and training never disagree.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..quiet import quiet_libraries
from .report import DECODER_FIELDS, Report

__all__ = [
    "BLOCK_FIELDS",
    "DRAFT_FIELDS",
    "UNUSED_DATA",
    "DraftChoices",
    "aux_layers",
    "draft_options",
    "draft_section",
    "draft_vocab_of",
    "planned_draft",
    "train_config",
]

#: The draft-config fields the report shows.
DRAFT_FIELDS = (
    *DECODER_FIELDS,
    "hidden_act",
    "rms_norm_eps",
    "max_position_embeddings",
)
#: The data path given to training's parser when the user names none.
UNUSED_DATA = "unused"
#: A block drafter's fields the report shows beside them.
BLOCK_FIELDS = ("block_size", "mask_token_id", "sample_from_anchor")


@dataclass(frozen=True)
class DraftChoices:
    """The draft flags of ``speculators train`` that shape the draft; ``None``
    leaves a flag to training's default (which depends on ``arch``)."""

    #: ``--draft-arch``: llama, qwen3 or deepseek_v3 (MLA); ``None``: train's
    #: default (llama for eagle3, qwen3 otherwise).
    arch: str | None = None
    #: ``--num-layers``; ``None``: train's default (5 for the DFlash family, 1
    #: otherwise).
    num_layers: int | None = None
    #: ``--norm-before-fc`` / ``--no-norm-before-fc``.
    norm_before_fc: bool | None = None
    #: ``--norm-output`` / ``--no-norm-output``.
    norm_output: bool | None = None
    #: ``--fc-norm``.
    fc_norm: bool = False
    #: ``--speculator-type``: eagle3 or a block drafter (dflash, dflash2,
    #: dspark, xpress); peagle and mtp train but vLLM 0.34 serves neither.
    speculator_type: str = "eagle3"
    #: Any other ``speculators train`` flags, as given to it (after ``--``);
    #: they come last, so where one repeats a flag above it wins, as in train.
    train_flags: tuple[str, ...] = ()


def train_config(
    verifier: str,
    choices: DraftChoices,
    *,
    draft_vocab_size: int | None = None,
    trust_remote_code: bool = False,
) -> tuple[Any, list[str]]:
    """``speculators train``'s resolved config for these flags (its own parser
    and defaults), and the warnings it gives about them (a flag of another
    algorithm, which training ignores).

    :raises ConfigError: training refuses the flags (its parser's line for an
        unknown flag or a bad value).
    """
    from speculators.train.config import TrainConfig
    from speculators.train.config.resolution import ConfigError

    argv = ["--verifier-name-or-path", verifier, "--data-path", UNUSED_DATA]
    argv += ["--speculator-type", choices.speculator_type]
    if choices.arch is not None:
        argv += ["--draft-arch", choices.arch]
    if choices.num_layers is not None:
        argv += ["--num-layers", str(choices.num_layers)]
    for flag, value in (
        ("norm_before_fc", choices.norm_before_fc),
        ("norm_output", choices.norm_output),
    ):
        if value is not None:
            argv.append(f"--{'' if value else 'no-'}{flag.replace('_', '-')}")
    if choices.fc_norm:
        argv.append("--fc-norm")
    if draft_vocab_size is not None:
        argv += ["--draft-vocab-size", str(draft_vocab_size)]
    if trust_remote_code:
        argv.append("--trust-remote-code")
    said = io.StringIO()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with contextlib.redirect_stderr(said):
                cfg = TrainConfig.resolve([*argv, *choices.train_flags])
        except SystemExit:
            # argparse's own refusal (an unknown flag, a bad value): its line
            lines = said.getvalue().strip().splitlines() or ["no message"]
            raise ConfigError(lines[-1]) from None
    return cfg, list(dict.fromkeys(str(w.message) for w in caught))


def draft_vocab_of(cfg: Any, verifier_vocab: int) -> int:
    """The draft vocabulary training gives these flags: ``--draft-vocab-size``,
    else the ``--d2t-path`` mapping's, else the verifier's."""
    if cfg.draft.draft_vocab_size is not None:
        return int(cfg.draft.draft_vocab_size)
    if cfg.draft.d2t_path and Path(cfg.draft.d2t_path).is_file():
        import numpy as np

        return int(np.load(cfg.draft.d2t_path, mmap_mode="r").shape[0])
    return verifier_vocab


#: The mask token a plan holds while the tokenizer that gives it cannot load.
_UNRESOLVED_MASK = 0


class _Planned(Exception):
    """Carries the config a draft's constructor was called with."""

    def __init__(self, config: Any) -> None:
        super().__init__("planned")
        self.config = config


def planned_draft(
    cfg: Any, draft_vocab: int, verifier_vocab: int, *, read_tokenizer: bool = True
) -> tuple[Any, str | None]:
    """The speculator config ``speculators train`` builds for ``cfg``: its own
    ``build_draft_model`` (the algorithm's ``from_training_args``: layers, aux
    layers, mask token, block fields), stopped at the draft's constructor, so no
    tensor is allocated or read.

    Training takes the draft's mask token from the verifier's tokenizer (unless
    ``--mask-token-id``). Without ``read_tokenizer`` (a Hub id: doctor downloads
    no tokenizer), or when the tokenizer does not load here (a weights-only copy,
    remote code not trusted), the plan holds a stand-in, and the second value
    says so (else ``None``).
    """
    from speculators.model import SpeculatorModel
    from speculators.train.cli import build_draft_model
    from speculators.train.utils import resolve_mask_token_id

    model_class = (SpeculatorModel.registry or {})[cfg.speculator_type]

    class _Stop(model_class):  # type: ignore[misc, valid-type]
        def __init__(self, config: Any, *_args: Any, **_kwargs: Any) -> None:
            raise _Planned(config)

    args = argparse.Namespace(**cfg.flatten())
    unresolved = None
    with quiet_libraries():
        if args.mask_token_id is not None or cfg.speculator_type == "mtp":
            pass  # given, or none (MTP's draft has no mask token)
        elif not read_tokenizer:
            args.mask_token_id = _UNRESOLVED_MASK
            unresolved = (
                "the mask token is not resolved here (doctor downloads no "
                "tokenizer); training takes it from the verifier's tokenizer, or "
                "--mask-token-id"
            )
        else:
            try:
                args.mask_token_id = resolve_mask_token_id(
                    args.verifier_name_or_path,
                    verifier_vocab,
                    trust_remote_code=args.trust_remote_code,
                )
            except Exception as err:  # whatever the tokenizer's loader raises
                args.mask_token_id = _UNRESOLVED_MASK
                unresolved = (
                    "the mask token is not resolved here: the verifier's tokenizer "
                    f"did not load ({type(err).__name__}: {str(err)[:200]}); "
                    "training takes it from that tokenizer, or --mask-token-id"
                )
        try:
            build_draft_model(args, _Stop, None, None, draft_vocab)
        except _Planned as planned:
            return planned.config, unresolved
    raise RuntimeError(
        f"speculators train built a {cfg.speculator_type} draft without calling "
        "its constructor"
    )


def aux_layers(planned: Any) -> list[int] | None:
    """The verifier layers the draft of speculator config ``planned`` reads
    (its model's ``target_layer_ids``: EAGLE-3's and the DFlash family's field);
    ``None`` for MTP, which reads the last layer."""
    for name in ("eagle_aux_hidden_state_layer_ids", "aux_hidden_state_layer_ids"):
        ids = getattr(planned, name, None)
        if ids:
            return [int(i) for i in ids]
    return None


def draft_section(
    cfg: Any, planned: Any, report: Report, *, draft_vocab: int, mask_known: bool
) -> dict[str, Any]:
    """The draft decoder config training builds and its options (norms and
    embedding for EAGLE-3, the block for a block drafter); returns the options.
    Without ``mask_known`` the plan's mask token is a stand-in, shown as none."""
    from speculators.models.eagle3.model_definitions import MLA_FIELDS

    draft = planned.transformer_layer_config
    mla = (*MLA_FIELDS, "rope_interleave", "rope_parameters")
    is_mla = getattr(draft, "model_type", None) == "deepseek_v3"
    fields = DRAFT_FIELDS + (mla if is_mla else ())
    if cfg.speculator_type in ("eagle3", "peagle"):
        options = _options_of(cfg.draft)
    else:
        options = {name: getattr(planned, name, None) for name in BLOCK_FIELDS}
        if not mask_known:
            options["mask_token_id"] = None
    report.draft_config = {"speculator_type": cfg.speculator_type}
    report.draft_config.update({name: getattr(draft, name, None) for name in fields})
    report.draft_config["draft_vocab_size"] = draft_vocab
    report.draft_config.update(options)
    return options


def draft_options(verifier: str, choices: DraftChoices) -> dict[str, Any]:
    """The draft's norm and embedding options as ``speculators train`` resolves
    them from the same flags (its own defaults, e.g. no ``--norm-before-fc`` for
    an MLA draft)."""
    return _options_of(train_config(verifier, choices)[0].draft)


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
