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
    "embedding_path",
]


class UnsupportedDecoderError(CommandError, TypeError):
    """The verifier's decoder is not one layer list and one final norm after it
    (XGLM's final norm is ``layer_norm``, a name no family has: named with
    ``--verifier-norm-key``, not guessed): a command that hooks them cannot read
    it."""


_LAYER_NAMES = ("layers", "h", "blocks", "layer")
_FINAL = -1  # the captured key of the final norm's input


def embedding_path(model: torch.nn.Module) -> str | None:
    """The module path of ``model``'s input embedding (None: it has none)."""
    try:
        embed = model.get_input_embeddings()  # type: ignore[operator]
    except (AttributeError, NotImplementedError):
        return None
    return next((n for n, m in model.named_modules() if m is embed), None) or None


def _decoder_body(model: torch.nn.Module) -> torch.nn.Module:
    """The module that holds the decoder's layers: the parent of its input
    embedding, where the weight resolver anchors the final norm too (OPT's
    ``decoder``, a multimodal model's ``language_model``), if a layer list is
    there; else the base model itself."""
    base: torch.nn.Module = getattr(model, "base_model", model)
    path = embedding_path(base)
    if path is None:
        return base
    anchor = base.get_submodule(path.rpartition(".")[0])
    lists = [getattr(anchor, n, None) for n in _LAYER_NAMES]
    return anchor if any(isinstance(m, torch.nn.ModuleList) for m in lists) else base


def decoder_parts(
    model: torch.nn.Module, final_norm: str | None = None
) -> tuple[torch.nn.ModuleList, torch.nn.Module]:
    """The decoder layer list and final norm of a base model or a ``*ForCausalLM``.

    :param final_norm: the final norm's module path under the decoder's body
        (:func:`_decoder_body`), as the verifier's weight spec names it
        (``--verifier-norm-key``); default: the one module of the weight
        resolver's final-norm names for the verifier's model type there.
    :raises UnsupportedDecoderError: no single layer list, or no final norm.
    """
    from speculators.utils.verifier_weights import final_norm_names

    body = _decoder_body(model)
    config = getattr(body, "config", None) or getattr(model, "config", None)
    n_layers = getattr(config, "num_hidden_layers", None)
    layers = [
        getattr(body, name)
        for name in _LAYER_NAMES
        if isinstance(getattr(body, name, None), torch.nn.ModuleList)
        and (n_layers is None or len(getattr(body, name)) == n_layers)
    ]
    if final_norm is not None:
        norm = _named_module(body, final_norm)
        norms = [] if norm is None else [norm]
        names = final_norm
    else:
        norm_names = final_norm_names(getattr(config, "model_type", None))
        norms = [
            getattr(body, name)
            for name in norm_names
            if isinstance(getattr(body, name, None), torch.nn.Module)
        ]
        names = "/".join(norm_names)
    if len(layers) != 1 or len(norms) != 1:
        children = ", ".join(name for name, _ in body.named_children())
        raise UnsupportedDecoderError(
            f"{type(model).__name__}: the aux states are read as the inputs of one "
            f"decoder layer list ({'/'.join(_LAYER_NAMES)}) of "
            f"num_hidden_layers={n_layers} layers and of one final norm "
            f"({names}); its {type(body).__name__} has "
            f"{len(layers)} such list(s) and {len(norms)} such norm(s) among its "
            f"modules ({children}), so this command cannot read this verifier"
        )
    if any(m is norms[0] for m in layers[0].modules()):
        raise UnsupportedDecoderError(
            f"{type(model).__name__}: its final norm {names} is a module of its "
            "decoder layers, not the norm after the last one, so the final "
            "hidden state would be read inside a layer: name the final norm"
        )
    return layers[0], norms[0]


def _named_module(body: torch.nn.Module, path: str) -> torch.nn.Module | None:
    try:
        return body.get_submodule(path)
    except AttributeError:
        return None


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

    def __init__(
        self,
        model: torch.nn.Module,
        layer_ids: Sequence[int],
        final_norm: str | None = None,
    ) -> None:
        self.layer_ids = list(layer_ids)
        self.captured: dict[int, torch.Tensor] = {}
        layers, norm = decoder_parts(model, final_norm)
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
                expected = (
                    "[batch, seq, hidden]"
                    if hs.dim() != 3
                    else f"layer {self.layer_ids[0]}'s {tuple(states[0].shape)}"
                )
                raise ValueError(
                    f"the input of layer {key} has shape {tuple(hs.shape)}, not "
                    f"{expected}: EAGLE-3 needs one hidden state per "
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
    final_norm: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``[batch, seq, len(layer_ids) + 1, hidden]`` in vLLM's aux-hidden-state layout.

    :param return_logits: also return the logits (a ``*ForCausalLM`` only).
    :param final_norm: see :func:`decoder_parts`.
    :returns: ``(hidden_states, logits or None)``.
    """
    kwargs: dict[str, Any] = {}
    if "logits_to_keep" in inspect.signature(model.forward).parameters:
        kwargs["logits_to_keep"] = 0 if return_logits else 1
    elif return_logits:
        raise TypeError(f"{type(model).__name__} has no output head for logits")
    with AuxCapture(model, layer_ids, final_norm) as capture:
        out = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            use_cache=False,
            **kwargs,
        )
    return capture.stacked(), (out.logits if return_logits else None)
