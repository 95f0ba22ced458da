"""The export directory written whole or not at all: ``out`` checked, the files
written to a staging directory beside it, renamed into place."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import ExportError

__all__ = ["check_not_an_input", "check_out", "write_export"]


def check_out(out: Path, overwrite: bool) -> None:
    """Refuse an ``out`` that is a file, the working directory (or above it), one
    that holds directories (an export is files only: a directory there is a
    training run's, or a user's), or a non-empty one unless ``overwrite``
    (whose files would otherwise be mixed with the export's)."""
    if out.exists() and not out.is_dir():
        raise ExportError(f"--out {out} is a file, not a directory")
    here = Path.cwd().resolve()
    if out.resolve() == here or out.resolve() in here.parents:
        raise ExportError(
            f"--out {out} holds the working directory, which the export would "
            "replace; name a new directory (e.g. --out ./serve)"
        )
    if not out.is_dir():
        return
    held = sorted(out.iterdir())
    trained = [*out.glob("training_state.json"), *out.glob("*/training_state.json")]
    if trained:
        raise ExportError(
            f"--out {out} holds a training run ({trained[0]}); an export never "
            "replaces one, even with --overwrite: choose another directory"
        )
    folders = [p.name for p in held if p.is_dir()]
    if folders:
        raise ExportError(
            f"--out {out} holds directories ({_shown(folders)}), which an export "
            "never has (a training run's?); it is not replaced, even with "
            "--overwrite: choose another directory"
        )
    if held and not overwrite:
        raise ExportError(
            f"--out {out} is not empty ({_shown([p.name for p in held])}); choose a "
            "new directory, or pass --overwrite to replace it whole"
        )


def check_not_an_input(out: Path, inputs: Mapping[str, Path]) -> None:
    """Refuse an ``out`` that is, or holds, what the export reads (``inputs``:
    what each is, e.g. ``"the verifier"``): replacing ``out`` whole deleted it."""
    target = out.resolve()
    for what, path in inputs.items():
        where = path.expanduser().resolve()
        if target == where or target in where.parents:
            relation = "is" if target == where else "holds"
            raise ExportError(
                f"--out {out} {relation} {what} {path}, which the export reads and "
                "would replace; choose a directory outside it"
            )


def _shown(names: list[str]) -> str:
    return ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")


def _move_into_place(staging: Path, out: Path) -> None:
    """Rename the finished ``staging`` to ``out``; a previous ``out`` is renamed
    aside first and removed only once the new one is in place."""
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        out.rename(old / out.name)
    try:
        staging.rename(out)
    except OSError:
        if old is not None:
            (old / out.name).rename(out)
        raise
    finally:
        if old is not None and out.exists():
            shutil.rmtree(old, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _open_as_usual(staging: Path) -> None:
    """Give ``staging`` and its files the modes a plain ``mkdir`` and ``open``
    would (``mkdtemp`` makes 0700, safetensors writes 0600), so a server running
    as another user can read the export."""
    mask = _umask()
    staging.chmod(0o777 & ~mask)
    for path in staging.iterdir():
        path.chmod(0o666 & ~mask)


def write_export(
    out: Path,
    tensors: dict[str, Any],
    config: dict[str, Any],
    carried: Mapping[str, Path],
) -> None:
    """Write ``tensors`` (``model.safetensors``), ``config`` (``config.json``) and
    copies of the ``carried`` files that exist (by their name in the export),
    then rename the lot to ``out``:
    ``out`` is the previous directory or the whole export, never a mix or a torn
    file."""
    from safetensors.torch import save_file

    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.staging-", dir=out.parent))
    try:
        save_file(
            tensors, str(staging / "model.safetensors"), metadata={"format": "pt"}
        )
        (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        for name, path in carried.items():
            if path.is_file():
                shutil.copy2(path, staging / name)
        _open_as_usual(staging)
        _move_into_place(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
