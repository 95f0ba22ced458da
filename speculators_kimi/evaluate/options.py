"""What one ``evaluate`` run is asked, read once from its flags into
:class:`EvaluationOptions` (all but ``--json``, which
:func:`~speculators_kimi.cli_args.emit_report` reads, as in every command)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["EvaluationOptions"]


@dataclass(frozen=True)
class EvaluationOptions:
    """The ``evaluate`` flags, typed and read once, so no step reads the Namespace."""

    #: ``--draft`` as given: a checkpoint, or a run's checkpoints directory.
    draft: str
    verifier: str
    #: Where the prompts come from (exactly one): a prepare-data directory, or
    #: a JSONL of conversations.
    data: str | None = None
    prompts: str | None = None
    #: ``None``: what the draft is served with (:func:`~speculators_kimi.served.
    #: served_tokens`: EAGLE-3's chain, a block drafter's block), as ``export``
    num_speculative_tokens: int | None = None
    max_new_tokens: int = 64
    temperature: float = 0.0
    num_prompts: int | None = None
    #: ``None``: the ratio the run recorded in its ``run.yaml`` (else 0.9)
    train_data_ratio: float | None = None
    split: str = "val"
    #: The JSON text as given: parsed only for ``prompts``, which uses it.
    chat_template_kwargs: str | None = None
    context_length: int | None = None
    #: Where the acceptance profile is written (JSON), if anywhere.
    profile: str | None = None
    each_epoch: bool = False
    seed: int = 0
    dtype: str = "auto"
    device: str = "auto"
    #: The placement flags as given, checked when the verifier loads, so that a
    #: run with several faults names the same one first as it always did.
    device_map: str | None = None
    max_memory: str | None = None
    offload_folder: str | None = None
    trust_remote_code: bool = False
    #: ``resolve_verifier_weights`` keywords, as the ``--verifier-*`` flags give them.
    weight_overrides: Mapping[str, str | None] | None = None
    progress: bool = True
