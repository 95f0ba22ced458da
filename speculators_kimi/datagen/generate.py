"""The generation loop: plan, skip finished files, run the decoder, write.

Batches are planned over the whole dataset (see :mod:`.plan`); a batch with any
file missing is recomputed whole, so results never depend on which of its files
survived an interruption, and a resumed run writes the same bytes as an
uninterrupted one.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from . import store
from .capture import capture_hidden_states
from .plan import check_context, default_target_layer_ids, plan_batches
from .verifier import Placement, input_device, load_text_verifier

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = ["DTYPES", "GenerationResult", "generate_hidden_states"]

DTYPES = {
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float32": torch.float32,
}


@dataclass
class GenerationResult:
    """What one call of :func:`generate_hidden_states` did."""

    output_dir: Path
    target_layer_ids: list[int]
    written: int
    skipped: int
    prefix: str


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
) -> GenerationResult:
    """Write ``hs_<i>.safetensors`` for every row of the prepare-data dataset.

    :param weight_overrides: the decoder's resolution overrides, see
        :func:`~speculators_kimi.datagen.verifier.decoder_prefix`.
    :param placement: a verifier bigger than one device: accelerate's dispatch
        over GPUs, CPU and disk (``device`` is then ignored).
    :raises ContextLengthError: a sample is longer than the verifier's context.
    :raises VerifierWeightsError: the decoder's weights cannot be located.
    """
    from datasets import load_from_disk
    from speculators.utils.text_config import load_text_config
    from tqdm.auto import tqdm

    if isinstance(dtype, str):
        dtype = DTYPES[dtype]
    data_path = Path(data_path)
    out_dir = (
        Path(output_dir) if output_dir is not None else data_path / store.HS_DIRNAME
    )
    dataset = load_from_disk(str(data_path)).with_format(None)
    rows: list[list[int]] = [list(map(int, r)) for r in dataset["input_ids"]]
    lengths = [len(ids) for ids in rows]

    text_config = load_text_config(str(verifier), trust_remote_code=trust_remote_code)
    check_context(lengths, getattr(text_config, "max_position_embeddings", None))
    layer_ids = default_target_layer_ids(
        verifier, target_layer_ids, trust_remote_code=trust_remote_code
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    store.remove_stale_temps(out_dir)

    def done(i: int) -> bool:
        return not overwrite and store.is_complete(
            store.hs_path(out_dir, i),
            rows[i],
            num_entries=len(layer_ids) + 1,
            hidden_size=int(text_config.hidden_size),
            dtype=dtype,
            layer_ids=layer_ids,
        )

    batches = plan_batches(
        lengths, batch_size=batch_size, max_batch_tokens=max_batch_tokens
    )
    todo = [[i for i in b if not done(i)] for b in batches]
    skipped = len(rows) - sum(len(t) for t in todo)
    result = GenerationResult(out_dir, layer_ids, 0, skipped, "")
    if skipped == len(rows):
        return result

    model, _, result.prefix = load_text_verifier(
        verifier,
        dtype=dtype,
        device=_pick_device(device),
        trust_remote_code=trust_remote_code,
        weight_overrides=weight_overrides,
        placement=placement,
    )
    dev = str(input_device(model))
    meta = store.file_metadata(layer_ids, result.prefix)
    bar = tqdm(
        total=len(rows),
        initial=skipped,
        desc="hidden states",
        unit="sample",
        disable=not progress,
        file=sys.stderr,
    )
    with bar:
        for batch, missing in zip(batches, todo, strict=True):
            if not missing:
                continue
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
                result.written += 1
                bar.update(1)
    return result
