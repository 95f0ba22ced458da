"""``--check-values``: NaN/inf in the verifier tensors the draft reads.

:func:`count_nonfinite` reads one tensor of a safetensors file in chunks;
:func:`values_section` runs it over the input embedding, the output head unless
tied, the final norm (a norm or head bias, an FP8 head scale too) and reports
non-finite values as a problem, since training rejects them. For a Hub id this downloads
the shards that hold them, as training would.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, TextIO

from .report import Problem, Report

__all__ = ["VALUE_CHUNK_BYTES", "count_nonfinite", "values_section"]

#: A tensor is read in chunks of this many stored bytes.
VALUE_CHUNK_BYTES = 16 << 20


def _value_targets(spec: Any) -> list[tuple[str, Any]]:
    """``(role, TensorInfo)`` of every verifier tensor the draft reads, once each."""
    tied = spec.head.key == spec.embed.key and spec.head.shard == spec.embed.shard
    targets = [("embedding (tied head)" if tied else "embedding", spec.embed)]
    if not tied:
        targets.append(("output head", spec.head))
    for role, info in (
        ("output head scale", spec.head_scale),
        ("output head bias", spec.head_bias),
        ("final norm", spec.norm),
        ("final norm bias", spec.norm_bias),
    ):
        if info is not None:
            targets.append((role, info))
    return targets


def count_nonfinite(
    path: str | Path, key: str, chunk_bytes: int = VALUE_CHUNK_BYTES
) -> tuple[int, int]:
    """NaN and inf counts of the tensor ``key`` of a safetensors file.

    Reads ``safetensors``' slices of about ``chunk_bytes`` (whole rows) one at a
    time, so a Kimi-K2.5 embedding (163840 x 7168 bf16, 2.3 GB) never needs more
    than one chunk of anonymous memory.

    :param path: the ``.safetensors`` file.
    :param key: the tensor's key.
    :param chunk_bytes: about how many bytes to read per chunk.
    :returns: ``(nan, inf)``; both 0 for a tensor that is not floating point.
    """
    import torch
    from safetensors import safe_open

    nan = inf = 0
    with safe_open(str(path), framework="pt", device="cpu") as handle:
        piece = handle.get_slice(key)
        shape = [int(dim) for dim in piece.get_shape()]
        if 0 in shape:
            return 0, 0
        if not shape:
            chunks: Any = [handle.get_tensor(key)]
        else:
            row_bytes = 8 * math.prod(shape[1:])  # an upper bound per element
            rows = max(1, chunk_bytes // row_bytes)
            chunks = (piece[first : first + rows] for first in range(0, shape[0], rows))
        for chunk in chunks:
            if not chunk.is_floating_point():
                return 0, 0
            if chunk.element_size() == 1:  # FP8: no isnan/isinf kernels
                chunk = chunk.float()
            # A max propagates NaN and inf: one cheap reduction clears a clean
            # chunk (about 8x faster than isnan + isinf on bf16 here).
            if torch.isfinite(chunk.abs().amax()):
                continue
            nan += int(torch.isnan(chunk).sum())
            inf += int(torch.isinf(chunk).sum())
    return nan, inf


def _check_tensor(
    spec: Any, role: str, info: Any, record: dict[str, Any], report: Report
) -> None:
    """Count one tensor's NaN/inf into ``record``; unreadable or non-finite
    values are a problem."""
    from speculators.utils.verifier_weights import resolve_checkpoint_file

    started = time.monotonic()
    try:
        nan, inf = count_nonfinite(
            resolve_checkpoint_file(spec.source, info.shard), info.key
        )
    except Exception as err:
        record.update(nan=None, inf=None, finite=None, error=str(err))
        report.problems.append(
            Problem(
                f"Cannot read the values of '{info.key}' ({info.shard}): "
                f"{type(err).__name__}: {err}",
                "Re-download the checkpoint (the shard is missing or damaged; "
                "for a Hub id offline, it must be in the Hugging Face cache).",
            )
        )
        return
    record.update(
        nan=nan,
        inf=inf,
        finite=not (nan or inf),
        seconds=round(time.monotonic() - started, 3),
    )
    if nan or inf:
        report.problems.append(
            Problem(
                f"Verifier {role} '{info.key}' ({info.shard}) holds {nan} NaN "
                f"and {inf} inf value(s); training rejects it.",
                "The verifier checkpoint holds non-finite values in "
                f"{info.key} ({info.shard}); re-download or re-export it.",
            )
        )


def values_section(spec: Any, report: Report, progress: TextIO | None = None) -> None:
    """Count NaN/inf in each tensor the draft reads from the verifier (``spec``:
    the resolved weight spec); non-finite is a problem. ``progress`` (a text
    stream) gets a line per tensor before it is read."""
    report.values = []
    for role, info in _value_targets(spec):
        record: dict[str, Any] = {
            "role": role,
            "key": info.key,
            "file": info.shard,
            "shape": list(info.shape),
            "dtype": info.dtype,
        }
        report.values.append(record)
        if progress is not None:
            print(
                f"checking values: {role} {info.key} {list(info.shape)} "
                f"{info.dtype} [{info.shard}] ...",
                file=progress,
                flush=True,
            )
        _check_tensor(spec, role, info, record, report)
