"""Speculator types that cannot train with the verifier or flags given, refused
before any work, in one line that says why and what to use instead.

Without these checks the run resolves its config, writes ``run.yaml``, builds (and
caches) vocabulary mappings and loads the verifier's weights before it fails in an
80-line traceback: ``dflash2`` with a reduced draft vocabulary in the model's
constructor, ``mtp`` on a verifier without an MTP layer in its layer registry or
its weight converter, and ``xpress --ce-from-data`` with a reduced vocabulary only
at the first training step.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from speculators.train.config.resolution import ConfigError
from speculators.utils.text_config import load_text_config

if TYPE_CHECKING:
    from speculators.train.config import TrainConfig

__all__ = ["check_speculator_type"]

#: What to train instead of an algorithm the verifier cannot have.
_SEPARATE_DRAFTS = "--speculator-type dspark, dflash or eagle3"
#: The weight-map prefix of a verifier's own multi-token-prediction layers.
_MTP_PREFIX = "mtp."


def _draft_vocab_size(cfg: TrainConfig) -> int | None:
    """The reduced draft vocabulary asked for, or ``None`` for the full one."""
    if cfg.draft.draft_vocab_size is not None:
        return cfg.draft.draft_vocab_size
    if cfg.draft.d2t_path:
        return int(np.load(cfg.draft.d2t_path, mmap_mode="r").shape[0])
    return None


def _check_full_vocabulary(cfg: TrainConfig, verifier_vocab: int) -> None:
    needs = None
    if cfg.speculator_type == "dflash2":
        needs = (
            "--speculator-type dflash2 needs the verifier's full vocabulary (its "
            "candidate selector reranks verifier token ids)"
        )
    elif cfg.speculator_type == "xpress" and cfg.xpress.ce_from_data:
        needs = (
            "--speculator-type xpress --ce-from-data needs the verifier's full "
            "vocabulary (its labels are the data's verifier token ids)"
        )
    draft_vocab = _draft_vocab_size(cfg)
    if needs is None or draft_vocab is None or draft_vocab >= verifier_vocab:
        return
    given = (
        f"--draft-vocab-size {draft_vocab}"
        if cfg.draft.draft_vocab_size is not None
        else f"--d2t-path {cfg.draft.d2t_path} ({draft_vocab} tokens)"
    )
    raise ConfigError(
        f"{needs}, but {given} asks for a reduced one of the verifier's "
        f"{verifier_vocab}; drop it (or pass --draft-vocab-size {verifier_vocab}), "
        "or train --speculator-type dflash or dspark, which take a reduced vocabulary."
    )


def _checkpoint_keys(verifier: str) -> list[str] | None:
    """The weight-map keys of a local verifier; ``None`` where they cannot be
    listed here (a Hub id: the MTP converter reports it)."""
    from speculators.utils.loading import list_checkpoint_keys  # noqa: PLC0415

    if not Path(verifier).is_dir():
        return None
    try:
        return list_checkpoint_keys(verifier)
    except FileNotFoundError:
        return None


def _check_mtp(cfg: TrainConfig, model_type: str) -> None:
    from speculators.models.mtp.model_definitions import (  # noqa: PLC0415
        _MIN_TRANSFORMERS_VERSION,
        mtp_model_classes,
        resolve_model_type,
    )

    verifier = cfg.verifier.verifier_name_or_path
    try:
        resolve_model_type(model_type)
    except ValueError as err:
        if model_type in _MIN_TRANSFORMERS_VERSION:
            raise ConfigError(str(err)) from None
        raise ConfigError(
            "--speculator-type mtp fine-tunes the verifier's own multi-token "
            f"prediction layer, and the text model of {verifier} ('{model_type}') "
            "has none that speculators can train (MTP layers exist for "
            f"{', '.join(sorted(mtp_model_classes))}); train a separate draft "
            f"instead: {_SEPARATE_DRAFTS}."
        ) from None
    keys = _checkpoint_keys(verifier)
    if keys is not None and not any(key.startswith(_MTP_PREFIX) for key in keys):
        raise ConfigError(
            "--speculator-type mtp fine-tunes the verifier's own multi-token "
            f"prediction layer, and {verifier} has no '{_MTP_PREFIX}*' weights (a "
            "checkpoint saved without its MTP layer); use one that has them, or "
            f"train a separate draft instead: {_SEPARATE_DRAFTS}."
        )


def check_speculator_type(cfg: TrainConfig) -> None:
    """``cfg.speculator_type`` can train with this verifier and these flags.

    Reads the verifier's config (and, for MTP, its weight map's key names), never
    its tensors. A draft finetuned ``--from-pretrained`` brings its own layers and
    vocabulary and is not checked here.

    :raises ConfigError: the algorithm needs the full vocabulary and a reduced one
        was asked for, or MTP was asked for on a verifier without an MTP layer.
    """
    if cfg.draft.from_pretrained or cfg.speculator_type not in {
        "dflash2",
        "xpress",
        "mtp",
    }:
        return
    text_config = load_text_config(
        cfg.verifier.verifier_name_or_path,
        trust_remote_code=cfg.verifier.trust_remote_code,
    )
    if cfg.speculator_type == "mtp":
        _check_mtp(cfg, str(text_config.model_type))
    else:
        _check_full_vocabulary(cfg, int(text_config.vocab_size))
