"""How vLLM 0.34 serves a draft, from its checkpoint ``config.json`` alone:
:func:`serving_plan` picks the layout (speculators format or vLLM's native
one), writes the exported config and refuses what vLLM cannot serve as
trained. ``export`` writes what it plans; ``doctor`` plans the config a
``speculators train`` command would write, before anything is trained.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..served import SERVE_METHOD, unserved_reason
from .block import BlockCausality, block_serving_config
from .errors import ExportError
from .k3_dspark import K3_CLASS, is_mla_block_draft, k3_dspark_config
from .serving_config import layout_of, serving_config
from .xpress import XPRESS_CLASS, xpress_config

__all__ = ["ServingPlan", "serving_plan"]


@dataclass(frozen=True)
class ServingPlan:
    """A draft as vLLM 0.34 serves it."""

    #: the exported ``config.json``.
    config: dict[str, Any]
    #: ``speculators`` or ``native`` (:func:`.serving_config.layout_of`).
    layout: str
    #: the vLLM ``method`` it is served under (dflash2 and XPress as dflash).
    method: str
    #: vLLM's class for a native layout other than the MLA EAGLE-3 one
    #: (``K3DSparkForCausalLM``, ``Qwen3XPressForCausalLM``), else ``None``.
    architecture: str | None = None
    #: a block drafter's per-layer causality as trained and as written.
    causality: BlockCausality | None = None


def serving_plan(
    config: dict[str, Any],
    *,
    verifier_id: str,
    has_input_norm: bool,
    verifier: str | None = None,
) -> ServingPlan:
    """The plan for the draft of checkpoint ``config``, served beside the
    verifier ``verifier_id``.

    :param has_input_norm: the draft has an ``input_norm`` before ``fc``.
    :param verifier: a local copy of the verifier (the MLA layout's token ids).
    :raises ExportError: vLLM 0.34 cannot serve the draft as trained, with why
        and the flag to train it with.
    """
    algorithm = config.get("speculators_model_type")
    why = unserved_reason(algorithm)
    if why is not None:
        raise ExportError(f"a {algorithm} draft: {why}")
    method = SERVE_METHOD.get(str(algorithm), "eagle3")
    layout = layout_of(config)
    if is_mla_block_draft(config):
        # vLLM's K3DSparkForCausalLM: every layer bidirectional inside the
        # block (full attention), as trained.
        serving = k3_dspark_config(config)
        layers = int(serving["num_hidden_layers"])
        causality = BlockCausality((False,) * layers, False)
        return ServingPlan(serving, layout, method, K3_CLASS, causality)
    if algorithm == "xpress":
        serving, causality = xpress_config(config)
        return ServingPlan(serving, layout, method, XPRESS_CLASS, causality)
    if algorithm in SERVE_METHOD:
        serving, causality = block_serving_config(config, verifier_id)
        return ServingPlan(serving, layout, method, causality=causality)
    serving = serving_config(
        config,
        verifier_id=verifier_id,
        has_input_norm=has_input_norm,
        verifier=verifier,
    )
    return ServingPlan(serving, layout, method)
