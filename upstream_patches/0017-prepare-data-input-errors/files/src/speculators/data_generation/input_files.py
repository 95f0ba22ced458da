"""Local ``.json``/``.jsonl`` inputs of prepare-data, with errors that name the line.

``datasets``' JSON builder reports a bad input file as a bare ``StopIteration``
(an empty file), ``DatasetGenerationError`` with an Arrow message about a row of
a block (a truncated line, invalid UTF-8) or a long traceback ending in
``FileNotFoundError``. None of them names the file and line to fix. Invalid
UTF-8 inside a string value even loads, and fails later in a ``map`` worker as a
``UnicodeDecodeError``. These helpers check what is cheap to check before
loading (the file exists, is not blank, decodes as UTF-8), and on a load failure
scan the files line by line to report the first fault as one
:class:`DataFileError`.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from datasets import load_dataset

if TYPE_CHECKING:
    from collections.abc import Sequence

    from datasets import Dataset as HFDataset

__all__ = [
    "DataFileError",
    "NoSamplesError",
    "find_fault",
    "load_json_files",
    "utf8_fault",
]

_FIX = "fix or remove it, or pass another --data"


class DataFileError(ValueError):
    """A local data file is missing, empty, or not valid JSON / JSON Lines."""


class NoSamplesError(ValueError):
    """No sample of the input survives preprocessing."""


def _is_blank(path: Path) -> bool:
    """Whether ``path`` holds nothing but whitespace (read in chunks)."""
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            if chunk.strip():
                return False
    return True


def utf8_fault(path: str | Path, chunk_size: int = 1 << 20) -> str | None:
    """Where ``path`` first fails to decode as UTF-8, or ``None``.

    The file is read in chunks, so its size does not matter. ``datasets``' JSON
    builder loads invalid UTF-8 inside a string value without complaint; the
    rows then fail in a ``map`` worker, far from the file.

    :param path: A local file.
    :param chunk_size: Bytes read at a time.
    :return: ``"line N, byte offset B: ..."`` (``B`` counted from 0 in the
        file), ``None`` if the whole file is UTF-8.
    """
    line, offset, carry = 1, 0, b""
    with Path(path).open("rb") as handle:
        while True:
            chunk = handle.read(chunk_size)
            data = carry + chunk
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as err:
                # A character cut by the chunk boundary is decoded with the next.
                if chunk and err.end == len(data) and "end of data" in err.reason:
                    good, carry = data[: err.start], data[err.start :]
                else:
                    line += data.count(b"\n", 0, err.start)
                    return (
                        f"line {line}, byte offset {offset + err.start}: not UTF-8 "
                        f"text (byte {data[err.start]:#04x}; save the file as UTF-8)"
                    )
            else:
                good, carry = data, b""
            if not chunk:
                return None
            line += good.count(b"\n")
            offset += len(good)


def _line_fault(number: int, raw: bytes, jsonl: bool) -> str | None:
    line = raw.decode("utf-8")  # find_fault checked the file with utf8_fault
    if not jsonl or not line.strip():
        return None
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        cut = "; the last line, without a newline: was the file cut short?"
        end = "" if raw.endswith(b"\n") else cut
        return f"line {number}, column {err.colno}: not valid JSON ({err.msg}){end}"
    if not isinstance(record, dict):
        return f"line {number}: a JSON object is expected, not {line.strip()[:40]!r}"
    return None


def find_fault(path: str | Path) -> str | None:
    """The first reason ``path`` cannot be read as JSON records, or ``None``.

    A ``.jsonl`` file is checked line by line (blank lines are allowed), any
    other file as one JSON document.

    :param path: A local ``.json`` or ``.jsonl`` file.
    :return: ``"line N: ..."`` (or another short reason), ``None`` if readable.
    """
    path = Path(path)
    if _is_blank(path):
        return "the file is empty"
    fault = utf8_fault(path)
    if fault is not None:
        return fault
    jsonl = path.suffix == ".jsonl"
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            fault = _line_fault(number, raw, jsonl)
            if fault is not None:
                return fault
    if jsonl:
        return None
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        return f"line {err.lineno}, column {err.colno}: not valid JSON ({err.msg})"
    return None


def load_json_files(data_files: Sequence[str]) -> HFDataset:
    """Load local JSON / JSON Lines files as one dataset (``datasets``' builder).

    :param data_files: The files, in order.
    :return: The ``train`` split of all rows.
    :raises DataFileError: A file is missing, empty or not UTF-8, or the load
        failed and a file has a fault :func:`find_fault` can name (file and
        line).
    """
    for name in data_files:
        path = Path(name)
        if not path.is_file():
            raise DataFileError(f"--data {name}: the file does not exist")
        if _is_blank(path):
            raise DataFileError(f"{name}: the file is empty; {_FIX}")
        fault = utf8_fault(path)
        if fault is not None:
            raise DataFileError(f"{name}: {fault}; {_FIX}")
    # datasets logs each failing file at ERROR level before raising; the fault
    # reported below names the same file and its line, so that log is held back.
    builder_log = logging.getLogger("datasets.packaged_modules.json.json")
    level = builder_log.level
    builder_log.setLevel(logging.CRITICAL)
    try:
        return load_dataset("json", data_files=list(data_files), split="train")
    except Exception as err:
        for name in data_files:
            fault = find_fault(name)
            if fault is not None:
                raise DataFileError(f"{name}: {fault}; {_FIX}") from err
        raise
    finally:
        builder_log.setLevel(level)
