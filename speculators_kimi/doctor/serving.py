"""Before training: what ``speculators train`` refuses for these flags before
any work, and whether vLLM 0.34 serves the draft they would train.

Both are asked of the code that answers them later: training's own checks
(``check_speculator_type`` and the MLA DSpark vocabulary check), and
``export``'s :func:`~speculators_kimi.export.plan.serving_plan` on the
``config.json`` training would save (:func:`.draft.planned_draft`). So a draft
that would train for days and then be refused at export (an XPress draft of a
reduced vocabulary, a DFlash draft that samples from the anchor, an MLA DFlash)
is a problem here, with the flag to change.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..served import served_tokens, unserved_reason
from .report import Problem, Report

__all__ = ["serving_section", "training_refusal"]


def training_refusal(cfg: Any) -> Problem | None:
    """What ``speculators train`` refuses for ``cfg`` before any work (an
    algorithm these flags or this verifier cannot train), as a problem."""
    from speculators.train.cli import _check_mla_dspark_vocabulary
    from speculators.train.speculator_checks import check_speculator_type

    try:
        check_speculator_type(cfg)
        _check_mla_dspark_vocabulary(cfg)
    except ValueError as err:  # ConfigError and DataCheckError are ValueErrors
        return Problem(
            f"speculators train would stop before any work: {err}",
            "Do what the message says (the flag to give or change, or what this "
            "verifier cannot train).",
        )
    return None


def serving_section(verifier: str, planned: Any, report: Report) -> None:
    """How vLLM 0.34 serves the draft of the speculator config ``planned``, or
    the problem that it cannot (export's own refusal)."""
    from ..export.errors import ExportError
    from ..export.plan import serving_plan

    config = json.loads(planned.to_json_string())
    algorithm = config.get("speculators_model_type")
    why = unserved_reason(algorithm)
    if why is not None:
        report.problems.append(
            Problem(
                f"vLLM 0.34 does not serve a {algorithm} draft: {why}.",
                "Train --speculator-type eagle3, dflash, dflash2, dspark or "
                "xpress for a draft vLLM serves.",
            )
        )
        return
    local = verifier if Path(verifier).is_dir() else None
    try:
        plan = serving_plan(
            config,
            verifier_id=verifier,
            has_input_norm=bool(config.get("norm_before_fc")),
            verifier=local,
        )
    except ExportError as err:
        report.problems.append(
            Problem(
                "vLLM 0.34 could not serve the draft these flags would train "
                f"(`speculators-kimi export` would refuse it): {err}.",
                "Change that flag before training: nothing is trained yet.",
            )
        )
        return
    causality = plan.causality
    report.serving = {
        "method": plan.method,
        "layout": plan.layout,
        "architecture": plan.architecture,
        "num_speculative_tokens": served_tokens(config),
        "causal_layers": list(causality.layers) if causality else None,
    }
