"""The verifier's Hugging Face Hub id: ``vllm serve`` takes an id, never a path.

Given (``--verifier-id``), recorded in the checkpoint, or found from a local copy
(the Hub cache snapshot it sits in, or the ``_name_or_path`` its config records).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from .errors import ExportError

__all__ = ["hub_id_of", "is_hub_id", "serving_verifier_id"]

_CACHE_REPO = re.compile(r"models--([^/]+?)--([^/]+)/snapshots/")


def is_hub_id(name: str | None) -> bool:
    """Whether ``name`` reads as ``ORG/NAME`` and is no local path (which vLLM
    would take as one)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if not name or Path(name).expanduser().exists() or name.startswith((".", "/")):
        return False
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return "/" in name


def hub_id_of(verifier: str | None) -> str | None:
    """The Hub id a verifier came from: itself if it is one, a Hugging Face cache
    snapshot's repo, or the ``_name_or_path`` its config records."""
    if verifier is None:
        return None
    if is_hub_id(verifier):
        return verifier
    path = Path(verifier).expanduser()
    cached = _CACHE_REPO.search(str(path.resolve()) + "/")
    if cached:
        return f"{cached.group(1)}/{cached.group(2)}"
    config = path / "config.json"
    if config.is_file():
        recorded = json.loads(config.read_text()).get("_name_or_path")
        if is_hub_id(recorded):
            return str(recorded)
    return None


def _is_local_copy(recorded: str | None, local: str | None) -> bool:
    """Whether ``recorded`` is the relative path training was given for the
    ``local`` verifier (``demo/verifier`` for ``/runs/demo/verifier``), which
    reads as ``ORG/NAME`` wherever it does not exist."""
    if not recorded or not local or recorded == local or Path(recorded).is_absolute():
        return False
    tail = Path(recorded).parts
    return Path(local).expanduser().resolve().parts[-len(tail) :] == tail


def serving_verifier_id(
    *, verifier_id: str | None, recorded: str | None, local: str | None
) -> str:
    """The id the export names its verifier by: ``verifier_id`` if given, else the
    one ``recorded`` in the checkpoint or the ``local`` copy comes from.

    :raises ExportError: none is found, or the one given is not a Hub id.
    """
    if _is_local_copy(recorded, local):
        recorded = None  # a relative path, named from another directory
    hub_id = verifier_id or hub_id_of(recorded) or hub_id_of(local)
    if hub_id is None:
        raise ExportError(
            f"the draft's verifier is {recorded!r}, not a Hugging Face Hub id, and "
            "no id was found for it (no Hub cache origin, no _name_or_path in its "
            "config.json); vLLM needs one: pass --verifier-id ORG/NAME, the repo "
            "the verifier was downloaded from"
        )
    if not is_hub_id(hub_id):
        raise ExportError(
            f"--verifier-id {hub_id!r} is not a Hub id of the form ORG/NAME (or it "
            "names an existing local path, which vLLM refuses)"
        )
    return hub_id
