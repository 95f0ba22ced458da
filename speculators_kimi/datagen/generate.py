"""The generation loop: plan, skip finished files, run the decoder, write.

Batches are planned over the whole dataset (see :mod:`.plan`); a batch with any
file missing is recomputed whole, so results never depend on which of its files
survived an interruption, and a resumed run writes the same bytes as an
uninterrupted one. Under ``torchrun`` each rank computes its share of the
batches (see :mod:`.ranks`).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from speculators.data_generation.provenance import decoder_fingerprint

from ..errors import CommandError
from ..verifier.capture import capture_hidden_states
from ..verifier.loading import (
    DTYPES,
    Placement,
    decoder_prefix,
    input_device,
    load_text_verifier,
    local_verifier,
)
from ..verifier.shards import require_whole_shards
from . import store
from .plan import check_context, default_target_layer_ids, plan_batches
from .ranks import current_ranks

if TYPE_CHECKING:
    from transformers import PreTrainedModel

logger = logging.getLogger(__name__)

__all__ = [
    "GenerationResult",
    "OtherVerifierError",
    "OutputDirError",
    "generate_hidden_states",
]


class OtherVerifierError(CommandError):
    """Finished files of another verifier are in the output directory and
    ``on_mismatch`` is ``"error"``."""


class OutputDirError(CommandError):
    """The output directory cannot be created or written."""


@dataclass
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


def _prepare_output_dir(out_dir: Path) -> None:
    """Create ``out_dir`` and prove it writable before any model is loaded."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / f".write-probe{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except (FileExistsError, NotADirectoryError):
        blocker = next(
            (p for p in (out_dir, *out_dir.parents) if p.exists() and not p.is_dir()),
            out_dir,
        )
        raise OutputDirError(
            f"--output-dir {out_dir}: {blocker} is a file, not a directory; "
            "choose another --output-dir"
        ) from None
    except PermissionError as err:
        raise OutputDirError(
            f"--output-dir {out_dir}: no permission to write {err.filename}; "
            "choose a directory you can write, or fix its permissions"
        ) from None


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
        :func:`~speculators_kimi.verifier.loading.decoder_prefix`.
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
    from datasets import load_from_disk
    from speculators.train.data_checks import check_prepared_dataset
    from speculators.utils.text_config import load_text_config
    from tqdm.auto import tqdm

    if isinstance(dtype, str):
        dtype = DTYPES[dtype]
    data_path = Path(data_path)
    out_dir = (
        Path(output_dir) if output_dir is not None else data_path / store.HS_DIRNAME
    )
    check_prepared_dataset(data_path)  # a path that is not one: one line, named
    ranks = current_ranks()
    if ranks.distributed and placement is not None:
        raise CommandError(
            "--device-map/--max-memory spread one verifier over several devices; "
            "under torchrun each rank loads its own copy. Use one or the other"
        )
    dataset = load_from_disk(str(data_path)).with_format(None)
    rows: list[list[int]] = [list(map(int, r)) for r in dataset["input_ids"]]
    lengths = [len(ids) for ids in rows]

    text_config = load_text_config(str(verifier), trust_remote_code=trust_remote_code)
    check_context(lengths, getattr(text_config, "max_position_embeddings", None))
    layer_ids = default_target_layer_ids(
        verifier, target_layer_ids, trust_remote_code=trust_remote_code
    )
    # Before anything reads a shard (the fingerprint, a resume's checks, the load).
    require_whole_shards(local_verifier(verifier))
    _prepare_output_dir(out_dir)
    if ranks.is_main:  # not while another rank may be writing one
        store.remove_stale_temps(out_dir)
    ranks.barrier()
    prefix = decoder_prefix(
        local_verifier(verifier),
        text_config,
        trust_remote_code=trust_remote_code,
        overrides=weight_overrides,
    )
    fingerprint = decoder_fingerprint(verifier, prefix)

    states = [
        store.file_state(
            store.hs_path(out_dir, i),
            rows[i],
            num_entries=len(layer_ids) + 1,
            hidden_size=int(text_config.hidden_size),
            dtype=dtype,
            layer_ids=layer_ids,
            fingerprint=fingerprint,
        )
        for i in range(len(rows))
    ]
    ranks.barrier()  # every rank has looked before any rank writes
    others = [i for i, s in enumerate(states) if s is store.FileState.OTHER_VERIFIER]
    if others and on_mismatch == "error":
        raise OtherVerifierError(
            f"{len(others)} of {len(rows)} files in {out_dir} (the first: "
            f"{store.hs_path(out_dir, others[0]).name}) were generated by another "
            f"verifier than {verifier} (other weights or config); pass "
            "--on-mismatch regenerate to replace them, or another --output-dir"
        )
    batches = plan_batches(
        lengths, batch_size=batch_size, max_batch_tokens=max_batch_tokens
    )
    todo = [
        [i for i in b if overwrite or states[i] is not store.FileState.DONE]
        for b in batches
    ]
    skipped = len(rows) - sum(len(t) for t in todo)
    result = GenerationResult(
        out_dir,
        layer_ids,
        0,
        skipped,
        prefix,
        len(others),
        rank=ranks.rank,
        world_size=ranks.world_size,
    )
    if skipped == len(rows):
        return result
    if others and ranks.is_main:
        logger.warning(
            "%d files in %s were generated by another verifier (other weights or "
            "config than %s): regenerating them",
            len(others),
            out_dir,
            verifier,
        )

    mine = ranks.share(list(zip(batches, todo, strict=True)))
    model = None
    if any(missing for _, missing in mine):
        model, _, result.prefix = load_text_verifier(
            verifier,
            dtype=dtype,
            device=ranks.device(_pick_device(device)),
            trust_remote_code=trust_remote_code,
            weight_overrides=weight_overrides,
            placement=placement,
        )
        dev = str(input_device(model))
    meta = store.file_metadata(layer_ids, result.prefix, str(verifier), fingerprint)
    bar = tqdm(
        total=len(rows),
        initial=skipped,
        desc="hidden states",
        unit="sample",
        disable=not (progress and ranks.is_main),
        file=sys.stderr,
    )
    with bar:
        for step in range(ranks.steps(len(batches))):
            written = 0
            batch, missing = mine[step] if step < len(mine) else ([], [])
            if missing and model is not None:
                hs = _run_batch(model, batch, rows, layer_ids, dev)
                for row, i in enumerate(batch):
                    if i not in missing:
                        continue
                    store.write_atomic(
                        store.hs_path(out_dir, i),
                        {
                            "hidden_states": hs[row, : lengths[i]].contiguous(),
                            "token_ids": torch.tensor(rows[i], dtype=torch.long),
                        },
                        meta,
                    )
                    written += 1
            done = ranks.total(written)
            result.written += done
            bar.update(done)
    return result
