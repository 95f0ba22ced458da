"""The generation run: its plan (:func:`.plan.plan_generation`: every check, what
is finished, the batches), then the loop that loads the decoder once and writes.

Batches are planned over the whole dataset (see :mod:`.plan`); a batch with any
file missing is recomputed whole, so results never depend on which of its files
survived an interruption, and a resumed run writes the same bytes as an
uninterrupted one. Under ``torchrun`` each rank computes its share of the
batches (see :mod:`.ranks`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..verifier.capture import capture_hidden_states
from ..verifier.loading import DTYPES, Placement, input_device, load_decoder
from . import store
from .plan import GenerationPlan, OtherVerifierError, plan_generation
from .store import OutputDirError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

logger = logging.getLogger(__name__)

__all__ = [
    "GenerationResult",
    "OtherVerifierError",
    "OutputDirError",
    "generate_hidden_states",
    "write_planned",
]


@dataclass(frozen=True)
class GenerationResult:
    """What one call of :func:`generate_hidden_states` did."""

    output_dir: Path
    target_layer_ids: list[int]
    written: int
    skipped: int
    prefix: str
    #: Files of another verifier found (and regenerated).
    other_verifier: int = 0
    #: This process's rank and the job's size (``torchrun``); ``written`` is
    #: the whole job's.
    rank: int = 0
    world_size: int = 1


def _pick_device(device: str) -> str:
    if device != "auto":
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


def _padded(
    batch: Sequence[int], rows: Sequence[Sequence[int]]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ``input_ids`` and ``attention_mask`` of the batch's rows."""
    width = max(len(rows[i]) for i in batch)
    ids = torch.zeros(len(batch), width, dtype=torch.long)
    mask = torch.zeros(len(batch), width, dtype=torch.long)
    for row, i in enumerate(batch):
        ids[row, : len(rows[i])] = torch.tensor(rows[i])
        mask[row, : len(rows[i])] = 1
    return ids, mask


def _run_batch(
    model: PreTrainedModel,
    batch: Sequence[int],
    rows: Sequence[Sequence[int]],
    layer_ids: Sequence[int],
    device: str,
) -> torch.Tensor:
    ids, mask = _padded(batch, rows)
    hs, _ = capture_hidden_states(
        model, ids.to(device), layer_ids, attention_mask=mask.to(device)
    )
    return hs.to("cpu")


def generate_hidden_states(
    verifier: str | Path,
    data_path: str | Path,
    *,
    output_dir: str | Path | None = None,
    target_layer_ids: Sequence[int] | None = None,
    dtype: torch.dtype | str = torch.bfloat16,
    device: str = "auto",
    batch_size: int = 8,
    max_batch_tokens: int = 16384,
    trust_remote_code: bool = False,
    weight_overrides: Mapping[str, str | None] | None = None,
    progress: bool = True,
    overwrite: bool = False,
    placement: Placement | None = None,
    on_mismatch: str = "regenerate",
) -> GenerationResult:
    """Write ``hs_<i>.safetensors`` for every row of the prepare-data dataset.

    :param weight_overrides: the decoder's resolution overrides, see
        :func:`~speculators_kimi.verifier.resolved.decoder_prefix`.
    :param placement: a verifier bigger than one device: accelerate's dispatch
        over GPUs, CPU and disk (``device`` is then ignored).
    :param on_mismatch: what to do with finished files of another verifier
        (another fingerprint of config and decoder weights): ``"regenerate"``
        them, or ``"error"`` before any work.

    Under ``torchrun`` every rank calls it with the same arguments and writes
    its share of the batches; rank 0 shows the progress of the whole job.
    :raises ContextLengthError: a sample is longer than the verifier's context.
    :raises OtherVerifierError: see ``on_mismatch``.
    :raises OutputDirError: the output directory cannot be written.
    :raises VerifierWeightsError: the decoder's weights cannot be located.
    :raises BrokenShardError: a shard of the weight map is missing or damaged.
    :raises DataCheckError: ``data_path`` is not a prepare-data dataset.
    """
    plan = plan_generation(
        verifier,
        data_path,
        output_dir=output_dir,
        target_layer_ids=target_layer_ids,
        dtype=DTYPES[dtype] if isinstance(dtype, str) else dtype,
        batch_size=batch_size,
        max_batch_tokens=max_batch_tokens,
        trust_remote_code=trust_remote_code,
        weight_overrides=weight_overrides,
        overwrite=overwrite,
        placement=placement,
        on_mismatch=on_mismatch,
    )
    written = 0
    if plan.skipped != len(plan.rows):
        if plan.other_verifier and plan.ranks.is_main:
            logger.warning(
                "%d files in %s were generated by another verifier (other weights "
                "or config than %s): regenerating them",
                plan.other_verifier,
                plan.out_dir,
                verifier,
            )
        written = write_planned(
            plan, device=device, placement=placement, progress=progress
        )
    return GenerationResult(
        plan.out_dir,
        list(plan.layer_ids),
        written,
        plan.skipped,
        plan.verifier.prefix,
        plan.other_verifier,
        rank=plan.ranks.rank,
        world_size=plan.ranks.world_size,
    )


def write_planned(
    plan: GenerationPlan,
    *,
    device: str = "auto",
    placement: Placement | None = None,
    progress: bool = True,
) -> int:
    """Write this rank's share of the plan's files, in lockstep with the other
    ranks; the decoder is loaded only if this rank has a file to write.

    :returns: the files the whole job wrote.
    """
    from tqdm.auto import tqdm

    ranks = plan.ranks
    mine = ranks.share(list(zip(plan.batches, plan.todo, strict=True)))
    model: PreTrainedModel | None = None
    dev = ""
    if any(missing for _, missing in mine):
        model = load_decoder(
            plan.verifier,
            dtype=plan.dtype,
            device=ranks.device(_pick_device(device)),
            placement=placement,
        )
        dev = str(input_device(model))
    meta = store.file_metadata(
        plan.layer_ids,
        plan.verifier.prefix,
        str(plan.verifier.source),
        plan.fingerprint,
    )
    total = 0
    bar = tqdm(
        total=len(plan.rows),
        initial=plan.skipped,
        desc="hidden states",
        unit="sample",
        disable=not (progress and ranks.is_main),
        file=sys.stderr,
    )
    with bar:
        for step in range(ranks.steps(len(plan.batches))):
            written = 0
            batch, missing = mine[step] if step < len(mine) else ((), ())
            if missing and model is not None:
                written = _write_batch(plan, model, dev, batch, missing, meta)
            done = ranks.total(written)
            total += done
            bar.update(done)
    return total


def _write_batch(
    plan: GenerationPlan,
    model: PreTrainedModel,
    device: str,
    batch: Sequence[int],
    missing: Sequence[int],
    meta: dict[str, str],
) -> int:
    """Run one batch whole and write its ``missing`` files; returns how many."""
    hs = _run_batch(model, batch, plan.rows, plan.layer_ids, device)
    written = 0
    for row, i in enumerate(batch):
        if i not in missing:
            continue
        store.write_atomic(
            store.hs_path(plan.out_dir, i),
            {
                "hidden_states": hs[row, : len(plan.rows[i])].contiguous(),
                "token_ids": torch.tensor(plan.rows[i], dtype=torch.long),
            },
            meta,
        )
        written += 1
    return written
