"""NaN/inf checks that stop early and never allocate a full-size temporary."""

import torch

from speculators.utils.verifier_weights.spec import VerifierWeightsError

__all__ = ["check_finite", "has_nan"]

# has_nan: a small first probe (the all-NaN case), then pieces that bound the
# boolean temporary without many small kernel launches on an accelerator.
_NAN_PROBE_ELEMENTS = 1 << 12
_NAN_PIECE_ELEMENTS = 1 << 24


def has_nan(tensor: torch.Tensor) -> bool:
    """``bool(tensor.isnan().any())``, in pieces, stopping at the first NaN.

    A draft's verifier-owned parameters start all-NaN ("not loaded yet"), so the
    first piece usually answers; no full-size boolean temporary is ever made (for
    a Kimi-sized float32 embedding that is 1.2 GB and seconds of work).

    :param tensor: any tensor; non-floating tensors have no NaN.
    :return: whether ``tensor`` holds a NaN.
    """
    if not tensor.is_floating_point() or tensor.numel() == 0:
        return False
    flat = tensor.detach().reshape(-1)
    if bool(flat[:_NAN_PROBE_ELEMENTS].isnan().any()):
        return True
    for start in range(_NAN_PROBE_ELEMENTS, flat.numel(), _NAN_PIECE_ELEMENTS):
        if bool(flat[start : start + _NAN_PIECE_ELEMENTS].isnan().any()):
            return True
    return False


def check_finite(block: torch.Tensor, key: str) -> None:
    """Raise when ``block`` (a piece of tensor ``key``) holds NaN or inf.

    :param block: a piece of a loaded tensor.
    :param key: the tensor's key, for the message.
    :raises VerifierWeightsError: naming ``key``.
    """
    if not block.is_floating_point() or block.numel() == 0:
        return
    values = block if block.element_size() > 1 else block.float()
    if not bool(torch.isfinite(values).all()):
        raise VerifierWeightsError(
            f"Verifier tensor '{key}' contains NaN or inf values; the checkpoint "
            "is corrupt or was saved incorrectly."
        )
