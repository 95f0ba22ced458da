"""Known errors of the command line, reported as one short message.

A mistake in the input (a flag that cannot work, a verifier path that does not
exist, a ``config.json`` that is not JSON, a Hub id that offline mode cannot
reach) is an answer for the user, not a bug: the commands print what went wrong,
where, and how to fix it, and exit with status 1. ``SPECULATORS_TRACEBACK=1``
shows the full traceback instead.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from huggingface_hub import try_to_load_from_cache
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "TRACEBACK_ENV",
    "ModelSourceError",
    "check_model_source",
    "known_error_message",
    "run_cli",
]

#: Environment variable that shows the full traceback of a known error.
TRACEBACK_ENV = "SPECULATORS_TRACEBACK"


class ModelSourceError(ValueError):
    """A model argument names no readable local checkpoint or reachable Hub id."""


def _looks_local(name_or_path: str) -> bool:
    # Hub ids are "name" or "namespace/name": anything else is meant as a path.
    return (
        name_or_path.startswith((".", "/", "~"))
        or name_or_path.count("/") > 1
        or os.sep != "/"
        and os.sep in name_or_path
    )


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in {"1", "on", "yes", "true"}


def check_model_source(name_or_path: str, flag: str) -> None:
    """Fail early, with a clear message, when ``name_or_path`` cannot be read.

    :param name_or_path: A local model directory or a Hugging Face Hub model id.
    :param flag: The command-line option that named it, for the message.
    :raises ModelSourceError: If a local path does not exist or has no valid
        ``config.json``, if it is neither a path nor a valid Hub id, or if
        ``HF_HUB_OFFLINE`` is set and the id is not in the local cache.
    """
    path = Path(name_or_path).expanduser()
    if path.exists():
        config = path / "config.json" if path.is_dir() else path
        if not config.is_file():
            raise ModelSourceError(
                f"{flag} {name_or_path}: {config} does not exist; point it at a "
                "model directory that holds a config.json."
            )
        # Imported here: text_config imports this module's error type.
        from speculators.utils.text_config import load_config_dict  # noqa: PLC0415

        load_config_dict(config)  # invalid JSON is a ModelSourceError naming it
        return
    if _looks_local(name_or_path):
        raise ModelSourceError(
            f"{flag} {name_or_path}: the local path does not exist; check the "
            "path (or give a Hugging Face Hub id such as 'org/model')."
        )
    try:
        validate_repo_id(name_or_path)
    except HFValidationError:
        raise ModelSourceError(
            f"{flag} {name_or_path!r}: neither an existing local path nor a valid "
            "Hugging Face Hub id ('org/model')."
        ) from None
    if _offline() and not isinstance(
        try_to_load_from_cache(name_or_path, "config.json"), str
    ):
        raise ModelSourceError(
            f"{flag} {name_or_path}: this Hub id is not in the local Hugging Face "
            "cache and HF_HUB_OFFLINE=1 forbids downloading it; unset "
            f"HF_HUB_OFFLINE, or download it first (hf download {name_or_path})."
        )


def _known_types() -> tuple[type[BaseException], ...]:
    # Imported here: each pulls in a part of the library the caller may not use.
    from speculators.train.config.resolution import ConfigError  # noqa: PLC0415
    from speculators.utils.text_config import (  # noqa: PLC0415
        AmbiguousTextConfigError,
    )
    from speculators.utils.verifier_weights import (  # noqa: PLC0415
        VerifierWeightsError,
    )

    return (
        ConfigError,
        ModelSourceError,
        AmbiguousTextConfigError,
        VerifierWeightsError,
    )


def known_error_message(exc: BaseException) -> str | None:
    """The one-line report of ``exc``, or ``None`` when it is not a known error."""
    if isinstance(exc, _known_types()):
        return f"{type(exc).__name__}: {exc}"
    return None


def run_cli(main: Callable[[], Any]) -> Any:
    """Run a command's ``main``, reporting a known error as one short message.

    :param main: The command (e.g. the Typer app, or the trainer's entry).
    :return: What ``main`` returns.
    """
    try:
        return main()
    except Exception as exc:
        message = known_error_message(exc)
        if message is None or os.environ.get(TRACEBACK_ENV, "0") not in {"", "0"}:
            raise
        # Under torchrun every rank fails alike: one report is enough.
        if os.environ.get("RANK", "0") == "0":
            print(f"error: {message}", file=sys.stderr)  # noqa: T201
            print(  # noqa: T201
                f"(set {TRACEBACK_ENV}=1 to see the traceback)", file=sys.stderr
            )
        sys.exit(1)
