"""Before training, on the data a train command names (``-- --data-path DIR``):
what ``speculators train`` checks of it before its first step, asked of its own
checks (``speculators.train.data_checks``), so a job on eight GPUs does not
stop there after its draft and verifier weights are loaded.

* the prepared dataset and its tokenizer (another tokenizer's rows refused),
  as training checks them before any work;
* the hidden-state files (the ``file`` backend): every row's file there (or a
  vLLM endpoint to generate the rest), none torn, none of another verifier,
  other aux layers or another dataset, as training checks them once the draft
  is built. The endpoint itself is not contacted.
"""

from __future__ import annotations

import argparse
from typing import Any

from .draft import UNUSED_DATA, aux_layers
from .report import Problem, Report

__all__ = ["hidden_states_section", "prepared_data_refusal"]


def _problem(err: Exception) -> Problem:
    return Problem(
        f"speculators train would stop on its data: {err}",
        "Do what the message says before launching the run.",
    )


def prepared_data_refusal(cfg: Any) -> Problem | None:
    """What training refuses of ``--data-path`` before any work, as a problem
    (``None``: fine, or no data path given)."""
    from speculators.train.data_checks import (
        check_data_tokenizer,
        check_prepared_dataset,
    )

    if cfg.data.data_path == UNUSED_DATA:
        return None
    try:
        check_prepared_dataset(cfg.data.data_path)
        check_data_tokenizer(
            cfg.data.data_path,
            cfg.verifier.verifier_name_or_path,
            trust_remote_code=cfg.verifier.trust_remote_code,
        )
    except ValueError as err:  # DataCheckError
        return _problem(err)
    return None


def hidden_states_section(cfg: Any, planned: Any, report: Report) -> None:
    """Training's check of the hidden states for the planned draft (its
    backend built from the same flags), or nothing without a data path."""
    from hs_connectors import HiddenStatesBackend
    from speculators.train.data_checks import check_training_hidden_states

    if cfg.data.data_path == UNUSED_DATA:
        return
    args = argparse.Namespace(**cfg.flatten())
    backend = (HiddenStatesBackend.registry or {})[args.hidden_states_backend]
    transfer = backend.from_train_args(args, args.data_path)
    aux = aux_layers(planned)
    try:
        generates = check_training_hidden_states(
            cfg,
            transfer,
            num_target_layers=None if aux is None else len(aux),
            target_layer_ids=aux,
        )
    except ValueError as err:  # DataCheckError
        report.problems.append(_problem(err))
        return
    report.data = {
        "data_path": str(cfg.data.data_path),
        "hidden_states": str(getattr(transfer, "hidden_states_path", "")) or None,
        "aux_layers": aux,
        "asks_vllm_for_states": bool(generates),
    }
