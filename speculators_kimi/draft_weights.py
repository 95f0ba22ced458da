"""A draft checkpoint's ``model.safetensors``, checked before anything loads it.

``evaluate``, ``export`` and ``vllm-check`` read the same file; a missing or torn
one (a copy cut short, a disk that filled) is named in one line by each, not
met as a ``SafetensorError`` traceback inside a model's loader.
"""

from __future__ import annotations

from pathlib import Path

from .errors import MissingInputError

__all__ = ["draft_weights", "tensor_digests"]


def draft_weights(checkpoint: str | Path, advice: str) -> Path:
    """``checkpoint``'s ``model.safetensors``, once its header and size read whole.

    :param advice: what to do instead, for the message (e.g. "export another
        epoch's checkpoint").
    :raises MissingInputError: the file is missing, torn or not safetensors.
    """
    from safetensors import SafetensorError, safe_open

    weights = Path(checkpoint) / "model.safetensors"
    if not weights.is_file():
        raise MissingInputError(f"{checkpoint}: no model.safetensors; {advice}")
    try:
        with safe_open(str(weights), framework="pt"):
            pass
    except (SafetensorError, OSError) as err:
        raise MissingInputError(
            f"{weights} is torn or not a safetensors file ({err}); {advice}"
        ) from None
    return weights


def tensor_digests(weights: str | Path) -> dict[str, str]:
    """Each tensor of a safetensors file by name -> sha256 of its dtype, shape and
    bytes, read one at a time: an export renames and drops a checkpoint's
    tensors but never changes one, so its digests are among the checkpoint's."""
    import hashlib

    import torch
    from safetensors import safe_open

    digests = {}
    with safe_open(str(weights), framework="pt") as f:
        for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
            tensor = f.get_tensor(name).contiguous()
            digest = hashlib.sha256(f"{tensor.dtype}{list(tensor.shape)}".encode())
            digest.update(tensor.view(torch.uint8).numpy().tobytes())
            digests[name] = digest.hexdigest()
    return digests
