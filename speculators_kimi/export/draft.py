"""A trained draft exported: :func:`export_draft`, the steps in order (checks,
verifier id, config, tensors, write), and :class:`ExportResult`, what it wrote."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..draft_weights import draft_weights
from ..evaluate.epochs import table_choice
from ..evaluate.profile import check_profile, draft_digest
from ..served import served_tokens
from ..verifier.fit import check_draft_fits
from .block import BlockCausality, refuse_unservable
from .errors import ExportError
from .hub import serving_verifier_id
from .k3_dspark import K3_CLASS, k3_dspark_tensors
from .plan import serving_plan
from .serving_config import carried_files
from .weights import served_tensors
from .write import check_not_an_input, check_out, write_export
from .xpress import XPRESS_CLASS, xpress_tensors

__all__ = ["PROFILE_NAME", "ExportResult", "export_draft"]

#: The acceptance profile's name in an export (Model-Optimizer's name for it).
PROFILE_NAME = "speculation_profile.json"


@dataclass
class ExportResult:
    """What :func:`export_draft` wrote."""

    out: Path
    verifier_id: str
    num_speculative_tokens: int
    tensors: list[str]
    dropped: dict[str, str] = field(default_factory=dict)  # name -> why
    #: ``speculators`` (the speculators format) or ``native`` (an HF config for
    #: vLLM's ``Eagle3DeepseekV3ForCausalLM``, MLA drafts).
    layout: str = "speculators"
    checkpoint: Path | None = None  # what was exported (an epoch table's pick)
    #: the vLLM ``method`` it is served under (dflash2 is served as dflash).
    method: str = "eagle3"
    #: a block drafter's per-layer causality as trained and as written.
    causality: BlockCausality | None = None
    #: the dtype the checkpoint was trained in (vLLM runs it in the target's).
    trained_dtype: str | None = None
    #: the vLLM class of a native layout other than the MLA EAGLE-3 one
    #: (``K3DSparkForCausalLM``: an MLA DSpark; ``Qwen3XPressForCausalLM``).
    architecture: str | None = None
    #: the verifier's architectures, as the draft's config records them.
    verifier_architectures: list[str] = field(default_factory=list)


def _checkpoint_config(checkpoint: Path, out: Path, overwrite: bool) -> dict[str, Any]:
    """The checkpoint's config, once ``checkpoint`` holds a draft vLLM serves
    (EAGLE-3, DFlash, DFlash2, DSpark, XPress) and ``out`` is a place the export may be
    written to."""
    config_file = checkpoint / "config.json"
    if checkpoint.is_file():
        raise ExportError(
            f"{checkpoint} is a file: neither a checkpoint directory nor the epoch "
            "table of `speculators-kimi evaluate --each-epoch --json`"
        )
    if not config_file.is_file():
        best = checkpoint / "checkpoint_best"
        if (best / "config.json").is_file():
            raise ExportError(
                f"{checkpoint} is a run's checkpoints directory; export one of its "
                f"checkpoints, e.g. the best: {best}"
            )
        raise ExportError(f"{checkpoint}: no config.json; is it a checkpoint?")
    check_not_an_input(out, {"the checkpoint": checkpoint})
    check_out(out, overwrite)
    try:
        config: dict[str, Any] = json.loads(config_file.read_text())
    except ValueError as err:
        raise ExportError(f"{config_file} is not valid JSON ({err})") from None
    refuse_unservable(config.get("speculators_model_type"), str(config_file))
    speculators = config.get("speculators_config") or {}
    if not speculators.get("proposal_methods") or "verifier" not in speculators:
        raise ExportError(
            f"{config_file} has no speculators_config with proposal_methods and "
            "verifier; is it the config.json `speculators train` wrote?"
        )
    draft_weights(
        checkpoint,
        "is the checkpoint complete? Export another epoch's, or train again",
    )
    return config


def _fresh(profile: Path) -> Path:
    """Where the fix's new profile goes: beside ``profile``, not over it (it is
    another draft's or another K's, still right for that one)."""
    return profile.with_name(f"{profile.stem}-new{profile.suffix}")


def _check_profile(path: Path, algorithm: str, k: int, checkpoint: Path) -> None:
    """``path`` holds a profile whose figures follow from its rows, measured on
    this ``checkpoint`` (when it records which) at the ``k`` the export serves."""
    if not path.is_file():
        raise ExportError(f"--profile {path}: no such file")
    try:
        profile = json.loads(path.read_text())
        check_profile(profile)
    except (ValueError, KeyError, TypeError) as err:
        raise ExportError(
            f"--profile {path}: not an acceptance profile of `evaluate --profile` "
            f"({err})"
        ) from None
    measured = (profile["method"], profile["num_speculative_tokens"])
    if measured != (algorithm, k):
        raise ExportError(
            f"--profile {path}: measured on {measured[0]} at "
            f"num_speculative_tokens {measured[1]}; this export serves {algorithm} "
            f"at {k}. Measure this checkpoint: speculators-kimi evaluate --draft "
            f"{checkpoint} --verifier V --data D -k {k} --profile {_fresh(path)}"
        )
    measured_draft = profile["measurement_conditions"].get("draft_weights_sha256")
    if measured_draft is not None and measured_draft != draft_digest(checkpoint):
        raise ExportError(
            f"--profile {path}: measured on another draft than {checkpoint} (its "
            "weights differ); measure this one: speculators-kimi evaluate --draft "
            f"{checkpoint} --verifier V --data D -k {k} --profile {_fresh(path)}"
        )


def export_draft(
    checkpoint: str | Path,
    out: str | Path,
    *,
    verifier_id: str | None = None,
    keep_embeddings: bool = False,
    verifier: str | None = None,
    overwrite: bool = False,
    profile: str | Path | None = None,
) -> ExportResult:
    """Write ``out``: ``checkpoint`` in the form vLLM serves (``vllm serve out``
    for Llama-style EAGLE-3 layers and the block drafters; ``--speculative-config``
    for MLA layers and XPress).

    The export is written to a staging directory beside ``out`` and renamed into
    place, so ``out`` is either the previous directory or the whole new export,
    never a mix or a torn file.

    :param verifier: a local copy of the verifier to compare the embedding with
        (default: the path recorded in the checkpoint, when it exists).
    :param overwrite: replace an existing non-empty ``out`` whole.
    :param profile: an acceptance profile (``evaluate --profile``), checked and
        copied in as :data:`PROFILE_NAME`.

    ``checkpoint`` may also be the table of ``evaluate --each-epoch``: the
    epoch it picked is exported.

    :raises ExportError: no Hub id for the verifier, ``out`` is the checkpoint or
        a non-empty directory (without ``overwrite``), a draft vLLM cannot serve
        as trained (an MLA draft with ``norm_before_fc``, a block drafter whose
        layers' causality or head vLLM cannot express: :mod:`.block`; an XPress
        draft of a reduced vocabulary: :mod:`.xpress`), or an algorithm vLLM
        refuses (P-EAGLE).
    :raises DraftMismatchError: ``verifier`` is not of the draft's geometry.
    """
    from safetensors.torch import load_file

    checkpoint, out = Path(checkpoint), Path(out)
    if verifier is not None and not Path(verifier).expanduser().is_dir():
        # it only decides which tensors ship: passed over, it was silently ignored
        raise ExportError(
            f"--verifier {verifier}: no such directory (a local copy of the "
            "verifier, to compare the draft's embedding with)"
        )
    checkpoint = table_choice(checkpoint) or checkpoint
    config = _checkpoint_config(checkpoint, out, overwrite)
    if verifier is not None:
        # a verifier of another width or vocabulary: not the draft's, whatever ships
        check_draft_fits(checkpoint, verifier)
    algorithm = config["speculators_model_type"]
    k = served_tokens(config)
    if profile is not None:
        _check_profile(Path(profile), algorithm, k, checkpoint)
    recorded_verifier = config["speculators_config"]["verifier"]
    recorded = recorded_verifier.get("name_or_path")
    local = verifier or recorded
    reads = {"the verifier": Path(local)} if local and Path(local).is_dir() else {}
    if profile is not None:
        reads["the profile"] = Path(profile)
    check_not_an_input(out, reads)
    hub_id = serving_verifier_id(
        verifier_id=verifier_id, recorded=recorded, local=local
    )
    tensors = load_file(str(checkpoint / "model.safetensors"))  # checked above
    plan = serving_plan(
        config,
        verifier_id=hub_id,
        has_input_norm="input_norm.weight" in tensors,
        verifier=local,
    )
    if plan.architecture == K3_CLASS:
        kept, dropped = k3_dspark_tensors(tensors)
    elif plan.architecture == XPRESS_CLASS:
        # vLLM's Qwen3XPressForCausalLM: native layout, its refiner's names.
        kept, dropped = xpress_tensors(tensors)
    else:
        kept, dropped = served_tensors(
            config, tensors, verifier=local, keep_embeddings=keep_embeddings
        )
    carried = {name: checkpoint / name for name in carried_files(plan.layout)}
    if profile is not None:
        carried[PROFILE_NAME] = Path(profile)
    write_export(out, kept, plan.config, carried)
    return ExportResult(
        out,
        hub_id,
        k,
        sorted(kept),
        dropped,
        plan.layout,
        checkpoint,
        method=plan.method,
        causality=plan.causality,
        trained_dtype=config.get("dtype") or config.get("torch_dtype"),
        architecture=plan.architecture,
        verifier_architectures=recorded_verifier.get("architectures") or [],
    )
