"""The ``triton`` draft attention backend: our fused EAGLE-3 TTT attention kernels.

Registered with upstream's draft attention backend registry through the
``speculators.attention_backends`` entry point group (see ``pyproject.toml``), so
``--draft-attn-impl triton`` selects it. Unlike the built-in backends it never
materializes a mask: its "mask" is the packed sequence's document layout (ids and
per-token document bounds, ``document_layout``) and the sliding window, computed
once per batch. The TTT
step needs no mask extension, since the kernels read it off the key length
(``k`` holds steps ``0..t`` concatenated, as the draft model's ``DynamicCache``
does).

Importing this module imports neither Triton nor the kernels; they are imported at
the first mask build / attention call.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch
from speculators.models.attention_backends import DraftAttentionBackend

__all__ = [
    "InterpretedKernelsWarning",
    "TritonBackend",
    "TritonDraftMask",
    "triton_attention_forward",
]


@dataclass(frozen=True)
class TritonDraftMask:
    """What the ``triton`` kernels need to mask one packed sequence.

    :param layout: ``document_layout(document_ids)``, computed once per batch.
    :param sliding_window: Sliding window size in tokens, or ``None`` for full
        attention.
    """

    layout: torch.Tensor
    sliding_window: int | None

    @property
    def document_ids(self) -> torch.Tensor:
        """``[N]`` int32 document id per position, ``-1`` for padding (the
        layout's first row)."""
        return self.layout[0]


def triton_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: TritonDraftMask,
    scaling: float | None = None,
    dropout: float = 0.0,
    **_kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Transformers-style attention function backed by ``draft_attention``.

    :param module: The attention module (unused).
    :param query: ``[B, Hq, N, d_qk]`` queries of the current TTT step.
    :param key: ``[B, Hkv, (t+1)N, d_qk]`` keys of steps ``0..t``.
    :param value: ``[B, Hkv, (t+1)N, d_v]`` values, same layout (``d_v != d_qk``
        for multi-head latent attention drafts, ``--draft-arch deepseek_v3``).
    :param attention_mask: The :class:`TritonDraftMask` built by
        :meth:`TritonBackend.build_mask`.
    :param scaling: Softmax scale (an MLA layer's includes YaRN's ``mscale``);
        ``1/sqrt(d_qk)`` when ``None``.
    :param dropout: Attention dropout; must be 0 (the kernels have none).
    :returns: ``([B, N, Hq, d_v] attention output, None)``.
    """
    del module
    if not isinstance(attention_mask, TritonDraftMask):
        raise TypeError(
            "The 'triton' draft attention backend needs the mask built by "
            f"TritonBackend.build_mask, got {type(attention_mask).__name__}."
        )
    if dropout:
        raise ValueError(
            f"The 'triton' draft attention backend has no dropout (got {dropout})."
        )
    from speculators_kimi.kernels import draft_attention

    out = draft_attention(
        query,
        key,
        value,
        attention_mask.document_ids,
        scale=scaling,
        sliding_window=attention_mask.sliding_window,
        layout=attention_mask.layout,
    )
    return out.transpose(1, 2).contiguous(), None


class InterpretedKernelsWarning(UserWarning):
    """The kernels run in Triton's interpreter (CPU): correct, far slower."""


def _warn_interpreted() -> None:
    """Say that the kernels run in the interpreter, so a slow run has its reason
    in the output (Python shows it once per run)."""
    warnings.warn(
        "--draft-attn-impl triton on CPU runs in Triton's interpreter "
        "(TRITON_INTERPRET=1): correct, but far slower than sdpa; for tests, not "
        "for training.",
        InterpretedKernelsWarning,
        stacklevel=3,
    )


class TritonBackend(DraftAttentionBackend):
    """Fused Triton kernels; trains on CUDA, or on CPU in the Triton interpreter."""

    name = "triton"
    supports_cpu = False
    cpu_hint = (
        "set TRITON_INTERPRET=1 to run the kernels in Triton's interpreter: "
        "correct but far slower, for tests"
    )
    # Document bounds, O(N): sequence parallelism calls it once per step over the
    # whole sequence, not per block of queries.
    dense_mask = False
    attention_function = staticmethod(triton_attention_forward)

    def supports_device(self, device: torch.device | str) -> bool:
        """CUDA always; CPU only under the Triton interpreter (``TRITON_INTERPRET=1``).

        :param device: The device the draft model trains on.
        :returns: Whether the kernels can run there.
        """
        from speculators.train.device import triton_interpreter_enabled

        device_type = torch.device(device).type
        if device_type == "cuda":
            return True
        return device_type == "cpu" and triton_interpreter_enabled()

    def build_mask(
        self,
        document_ids: torch.Tensor,
        seq_len: int,
        device: torch.device | str,
        sliding_window: int | None = None,
    ) -> TritonDraftMask:
        """Document ids, their bounds and the window; computed once per batch.

        :param document_ids: ``[seq_len]`` document id per position, ``-1`` for
            padding.
        :param seq_len: Number of positions in the packed sequence.
        :param device: Device the kernels run on.
        :param sliding_window: Optional sliding window size, in tokens.
        :returns: The mask for every TTT step.
        """
        from speculators.train.device import triton_interpreter_enabled

        from speculators_kimi.kernels import document_layout

        if document_ids.shape != (seq_len,):
            raise ValueError(
                f"document_ids must be [{seq_len}], got {tuple(document_ids.shape)}"
            )
        doc = document_ids.to(device=device, dtype=torch.int32)
        if doc.device.type == "cpu" and triton_interpreter_enabled():
            _warn_interpreted()
        return TritonDraftMask(document_layout(doc), sliding_window)

    def extend_mask(self, mask: TritonDraftMask, seq_len: int) -> TritonDraftMask:
        """No-op: the kernels take the TTT step count from the key length.

        :param mask: The mask of the step just taken.
        :param seq_len: Number of positions in the packed sequence (unused).
        :returns: ``mask`` unchanged.
        """
        del seq_len
        return mask
