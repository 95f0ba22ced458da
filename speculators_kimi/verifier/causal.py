"""The verifier as speculative decoding sees it: logits and aux hidden states per
forward, over a KV cache.

The text decoder is the one hidden-state generation loads (same prefix, same
``transformers`` class, see :mod:`.loading`), the aux
states are captured by the same hooks (vLLM's layout), and the output head is the
tensor ``speculators train`` resolves (``resolve_verifier_weights``), read whole,
with its bias where it has one (Phi, GPT-J).
The logits are the ones the verifier samples from: what its ``ForCausalLM`` does
after the head (Gemma-2's softcap, Cohere's and Granite's logit scale) is read
from the text config by the same function training's targets use
(``resolve_logit_transform``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .capture import AuxCapture
from .loading import Placement, input_device, load_decoder
from .resolved import resolve_verifier

if TYPE_CHECKING:
    from transformers import Cache, PretrainedConfig, PreTrainedModel

__all__ = ["CausalVerifier", "eos_token_ids", "load_causal_verifier"]


def eos_token_ids(verifier: str | Path, text_config: PretrainedConfig) -> set[int]:
    """The ids that end a generation: the generation config's, else the text
    config's ``eos_token_id`` (an int or a list)."""
    from transformers import GenerationConfig

    try:
        found: Any = GenerationConfig.from_pretrained(str(verifier)).eos_token_id
    except OSError:  # no generation_config.json
        found = None
    if found is None:
        found = getattr(text_config, "eos_token_id", None)
    if found is None:
        return set()
    return {int(i) for i in (found if isinstance(found, list) else [found])}


@dataclass
class CausalVerifier:
    """A text decoder plus its output head, with the aux layers hooked.

    :param decoder: the base model (no head), possibly dispatched by accelerate.
    :param head: ``[vocab, hidden]`` output head weight.
    :param head_bias: ``[vocab]`` its bias, for a head that has one.
    :param layer_ids: the aux layer ids the draft was trained on.
    :param final_norm: see :func:`~.capture.decoder_parts`.
    """

    decoder: PreTrainedModel
    head: torch.Tensor
    layer_ids: list[int]
    text_config: PretrainedConfig
    eos_ids: set[int] = field(default_factory=set)
    forwards: int = 0
    final_norm: str | None = None
    head_bias: torch.Tensor | None = None

    def __post_init__(self) -> None:
        self._capture = AuxCapture(self.decoder, self.layer_ids, self.final_norm)
        self.device = input_device(self.decoder)
        from speculators.models.verifier_logits import resolve_logit_transform

        self._transform = resolve_logit_transform(self.text_config)

    def _logits(self, normed: torch.Tensor) -> torch.Tensor:
        """float32 logits, on the input device, of final-norm outputs, after the
        verifier's own transform (identity for most)."""
        bias = None if self.head_bias is None else self.head_bias.to(normed.device)
        logits = torch.nn.functional.linear(normed, self.head.to(normed.device), bias)
        return self._transform(logits.float()).to(self.device)

    @torch.no_grad()
    def forward(
        self, token_ids: Sequence[int], cache: Cache
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run ``token_ids`` after what ``cache`` holds (the cache grows).

        :returns: float32 ``logits`` ``[n, vocab]`` and the aux hidden states
            ``[n, len(layer_ids) * hidden]`` (the draft's ``fc`` input), both on
            the input device.
        """
        ids = torch.tensor([list(token_ids)], dtype=torch.long, device=self.device)
        with self._capture:
            out = self.decoder(input_ids=ids, past_key_values=cache, use_cache=True)
        self.forwards += 1
        aux = self._capture.stacked(self.device)[0, :, :-1]
        return self._logits(out.last_hidden_state[0]), aux.flatten(1)

    @torch.no_grad()
    def next_token_logits(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, cache: Cache
    ) -> torch.Tensor:
        """float32 logits ``[batch, vocab]`` of the last position of each row of a
        left-padded batch, after what ``cache`` holds (no aux states)."""
        mask = attention_mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -input_ids.shape[1] :]
        out = self.decoder(
            input_ids=input_ids.to(self.device),
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
        )
        self.forwards += 1
        return self._logits(out.last_hidden_state[:, -1])


def load_causal_verifier(
    verifier: str | Path,
    layer_ids: Sequence[int],
    *,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    placement: Placement | None = None,
    trust_remote_code: bool = False,
    weight_overrides: Mapping[str, str | None] | None = None,
) -> CausalVerifier:
    """The verifier's decoder (as datagen loads it) and its full output head.

    :raises VerifierWeightsError: the decoder or the head cannot be located.
    """
    from speculators.utils.verifier_weights import load_verifier_tensors

    resolved = resolve_verifier(
        verifier, trust_remote_code=trust_remote_code, weight_overrides=weight_overrides
    )
    decoder = load_decoder(resolved, dtype=dtype, device=device, placement=placement)
    tensors = load_verifier_tensors(resolved.weights, load_embed=False, load_norm=False)
    head_device = input_device(decoder) if placement is None else torch.device("cpu")
    bias = tensors.head_bias
    return CausalVerifier(
        decoder=decoder,
        head=tensors.head.to(device=head_device, dtype=dtype),
        head_bias=None if bias is None else bias.to(device=head_device, dtype=dtype),
        layer_ids=list(layer_ids),
        text_config=resolved.text_config,
        eos_ids=eos_token_ids(verifier, resolved.text_config),
        final_norm=resolved.final_norm,
    )
