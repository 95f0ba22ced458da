"""Aux-layer capture in vLLM's layout, with forward pre-hooks on the decoder.

Pre-hooks see exactly what vLLM's aux-hidden-state extraction sees: the residual
stream entering decoder layer ``i`` (id ``num_layers``: the input of the final
norm) and, as the last entry, the final hidden state before the norm.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..errors import CommandError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = [
    "AuxCapture",
    "UnsupportedDecoderError",
    "capture_hidden_states",
    "decoder_parts",
]


class UnsupportedDecoderError(CommandError, TypeError):
    """The verifier's decoder is not one layer list and one final norm (LFM2's
    final norm is ``embedding_norm``, a name another model uses for an input
    norm): a command that hooks them cannot read it."""


_LAYER_NAMES = ("layers", "h", "blocks", "layer")
_NORM_NAMES = ("norm", "ln_f", "final_layer_norm", "norm_f", "final_layernorm")
_FINAL = -1  # the captured key of the final norm's input


def decoder_parts(
    model: torch.nn.Module,
) -> tuple[torch.nn.ModuleList, torch.nn.Module]:
    """The decoder layer list and final norm of a base model or a ``*ForCausalLM``."""
    base: torch.nn.Module = getattr(model, "base_model", model)
    inner = getattr(base, "language_model", None)  # a multimodal base model
    if isinstance(inner, torch.nn.Module) and not hasattr(base, "layers"):
        base = inner
    n_layers = getattr(getattr(base, "config", None), "num_hidden_layers", None)
    layers = [
        getattr(base, name)
        for name in _LAYER_NAMES
        if isinstance(getattr(base, name, None), torch.nn.ModuleList)
        and (n_layers is None or len(getattr(base, name)) == n_layers)
    ]
    norms = [
        getattr(base, name)
        for name in _NORM_NAMES
        if isinstance(getattr(base, name, None), torch.nn.Module)
    ]
    if len(layers) != 1 or len(norms) != 1:
        children = ", ".join(name for name, _ in base.named_children())
        raise UnsupportedDecoderError(
            f"{type(model).__name__}: the aux states are read as the inputs of one "
            f"decoder layer list ({'/'.join(_LAYER_NAMES)}) of "
            f"num_hidden_layers={n_layers} layers and of one final norm "
            f"({'/'.join(_NORM_NAMES)}); its base model {type(base).__name__} has "
            f"{len(layers)} such list(s) and {len(norms)} such norm(s) among its "
            f"modules ({children}), so this command cannot read this verifier"
        )
    return layers[0], norms[0]


def _recorder(captured: dict[int, torch.Tensor], key: int) -> Callable[..., None]:
    def hook(_module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        hs = args[0] if args else kwargs["hidden_states"]
        captured[key] = hs.detach()

    return hook


def _hooked_modules(
    layers: torch.nn.ModuleList, norm: torch.nn.Module, layer_ids: Sequence[int]
) -> list[tuple[int, torch.nn.Module]]:
    """``(key, module)`` whose input is the state of each aux id, plus the final."""
    hooked: list[tuple[int, torch.nn.Module]] = []
    for i in sorted(set(layer_ids)):
        if i > len(layers):
            raise ValueError(f"layer id {i} > number of layers {len(layers)}")
        hooked.append((i, layers[i] if i < len(layers) else norm))
    return [*hooked, (_FINAL, norm)]


class AuxCapture:
    """Forward pre-hooks that record each aux layer's input and the final one.

    Used as a context manager around any number of forwards (with or without a
    KV cache); :meth:`stacked` gives the states of the last forward.
    """

    def __init__(self, model: torch.nn.Module, layer_ids: Sequence[int]) -> None:
        self.layer_ids = list(layer_ids)
        self.captured: dict[int, torch.Tensor] = {}
        layers, norm = decoder_parts(model)
        self._modules = _hooked_modules(layers, norm, self.layer_ids)
        self._handles: list[Any] = []

    def __enter__(self) -> AuxCapture:
        self._handles = [
            module.register_forward_pre_hook(
                _recorder(self.captured, key), with_kwargs=True
            )
            for key, module in self._modules
        ]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def stacked(self, device: torch.device | str | None = None) -> torch.Tensor:
        """``[batch, seq, len(layer_ids) + 1, hidden]`` of the last forward.

        :param device: where to gather them (layers of a dispatched model may sit
            on different devices); default: the first aux layer's device.
        """
        states = [self.captured[i] for i in [*self.layer_ids, _FINAL]]
        for key, hs in zip([*self.layer_ids, "the final norm"], states, strict=True):
            if hs.dim() != 3 or hs.shape != states[0].shape:
                raise ValueError(
                    f"the input of layer {key} has shape {tuple(hs.shape)}, not "
                    f"[batch, seq, hidden] like layer {self.layer_ids[0]}'s "
                    f"{tuple(states[0].shape)}: EAGLE-3 needs one hidden state per "
                    "aux layer (a verifier with several residual streams per "
                    "layer, such as DeepSeek-V4's hyper-connections, has none)"
                )
        target = states[0].device if device is None else device
        return torch.stack([hs.to(target) for hs in states], dim=2)


@torch.no_grad()
def capture_hidden_states(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    layer_ids: Sequence[int],
    attention_mask: torch.Tensor | None = None,
    *,
    return_logits: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``[batch, seq, len(layer_ids) + 1, hidden]`` in vLLM's aux-hidden-state layout.

    :param return_logits: also return the logits (a ``*ForCausalLM`` only).
    :returns: ``(hidden_states, logits or None)``.
    """
    kwargs: dict[str, Any] = {}
    if "logits_to_keep" in inspect.signature(model.forward).parameters:
        kwargs["logits_to_keep"] = 0 if return_logits else 1
    elif return_logits:
        raise TypeError(f"{type(model).__name__} has no output head for logits")
    with AuxCapture(model, layer_ids) as capture:
        out = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            use_cache=False,
            **kwargs,
        )
    return capture.stacked(), (out.logits if return_logits else None)
