"""Which decoder to load: the verifier's text decoder, found by training's resolver.

Hidden states need only the text **decoder** (embedding, layers, final norm; no
output head). Its checkpoint prefix is the one ``speculators train`` uses
(:func:`speculators.utils.verifier_weights.resolve_verifier_weights`, with the
same overrides), so datagen and training cannot pick different decoders (Kimi-K2.5:
``language_model.model``, Llama: ``model``, Falcon: ``transformer``, Qwen2.5-Omni:
``thinker.model``). Transformers' ``from_pretrained`` then reads the keys under
that prefix, so its load-time conversions apply (the Hub's per-expert MoE weights
are fused); other tensors (vision / audio / talker towers, heads, MTP layers) stay
out of the model.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..errors import CommandError
from .capture import embedding_path
from .resolved import (
    ResolvedVerifier,
    decoder_weights,
    local_verifier,
    resolve_verifier,
)

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel

__all__ = [
    "DTYPES",
    "Placement",
    "decoder_weights",
    "input_device",
    "load_decoder",
    "load_text_verifier",
    "local_verifier",
    "meta_decoder",
    "parse_max_memory",
]


#: The dtypes a verifier is loaded in, by their command-line names.
DTYPES = {
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float32": torch.float32,
}


@dataclass(frozen=True)
class Placement:
    """Where a verifier bigger than one device goes: ``accelerate``'s big-model
    dispatch, as ``from_pretrained(device_map=..., max_memory=...)`` does it.

    :param device_map: ``"auto"`` (fill GPUs, then CPU, then disk), ``"balanced"``,
        ``"sequential"``, or an explicit module -> device map.
    :param max_memory: the most each device may hold, e.g.
        ``{0: "70GiB", "cpu": "200GiB"}``; what does not fit goes to disk.
    :param offload_folder: where disk-offloaded weights go (default: a temporary
        directory, removed at exit).
    """

    device_map: str | dict[str, Any] = "auto"
    max_memory: dict[int | str, int | str] | None = None
    offload_folder: str | None = None

    def from_pretrained_kwargs(self) -> dict[str, Any]:
        """The ``from_pretrained`` keyword arguments of this placement."""
        folder = self.offload_folder
        if folder is None:
            folder = tempfile.mkdtemp(prefix="speculators-kimi-offload-")
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
        kwargs: dict[str, Any] = {"device_map": self.device_map}
        if self.max_memory is not None:
            kwargs["max_memory"] = dict(self.max_memory)
        return kwargs | {"offload_folder": folder}


def parse_max_memory(text: str) -> dict[int | str, int | str]:
    """``"0=70GiB,1=70GiB,cpu=200GiB"`` as ``accelerate``'s ``max_memory`` dict.

    :raises CommandError: an entry is not ``DEVICE=SIZE``.
    """
    out: dict[int | str, int | str] = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        device, sep, size = entry.partition("=")
        if not sep or not device or not size:
            raise CommandError(
                f"--max-memory entry {entry!r}: expected DEVICE=SIZE, e.g. "
                "'0=70GiB,cpu=200GiB' (a GPU index, cpu or mps)"
            )
        device = device.strip()
        out[int(device) if device.isdigit() else device] = size.strip()
    return out


def input_device(model: torch.nn.Module) -> torch.device:
    """Where a (possibly dispatched) decoder takes its ``input_ids``: the device
    of its input embedding (an offloaded one runs on CPU)."""
    embed = model.get_input_embeddings()  # type: ignore[operator]
    device_map = getattr(model, "hf_device_map", None)
    if device_map:
        name = next((n for n, m in model.named_modules() if m is embed), None)
        placed = device_map.get(name) if name is not None else None
        if placed is None and "" in device_map:
            placed = device_map[""]
        if isinstance(placed, int):
            return torch.device("cuda", placed)
        if placed is not None:
            return torch.device("cpu" if placed == "disk" else placed)
    return embed.weight.device


def _module_decoder_class(
    text_config: PretrainedConfig,
) -> type[PreTrainedModel] | None:
    """The model class of the config's own module that takes exactly this config.

    For text configs without an Auto mapping (Qwen2.5-Omni's thinker text model).
    """
    from transformers import PreTrainedModel

    name = type(text_config).__module__.replace(".configuration_", ".modeling_")
    module = sys.modules.get(name)
    if module is None:
        with contextlib.suppress(ImportError):
            module = importlib.import_module(name)
    if module is None:
        return None
    found = [
        cls
        for cls in vars(module).values()
        if isinstance(cls, type)
        and issubclass(cls, PreTrainedModel)
        and getattr(cls, "config_class", None) is type(text_config)
        and cls.__name__.endswith("Model")
    ]
    return found[0] if len(found) == 1 else None


def meta_decoder(
    text_config: PretrainedConfig, *, trust_remote_code: bool = False
) -> PreTrainedModel:
    """The text decoder (base model, no head) built on the meta device: from
    ``AutoModel``, else the base model of ``AutoModelForCausalLM``, else the
    config's own module's model class.

    :raises TypeError: ``transformers`` has no class for it.
    """
    from transformers import AutoModel, AutoModelForCausalLM
    from transformers.initialization import no_init_weights

    errors = []
    with no_init_weights(), torch.device("meta"):
        for auto in (AutoModel, AutoModelForCausalLM):
            try:
                model = auto.from_config(
                    text_config, trust_remote_code=trust_remote_code
                )
            except ValueError as err:
                errors.append(str(err).splitlines()[0])
                continue
            return model.base_model
        found = _module_decoder_class(text_config)
        if found is not None:
            return found(text_config)
    raise TypeError(
        f"no text decoder class for {type(text_config).__name__} "
        f"(model_type {text_config.model_type!r}): {'; '.join(errors)}"
    )


def _load_prefix(decoder: torch.nn.Module, verifier: ResolvedVerifier) -> str:
    """The checkpoint prefix that maps onto the decoder class's own keys: the
    embedding key less the embedding's path in the class (OPT's decoder class
    holds its layers under ``decoder.``, the checkpoint under ``model.decoder.``);
    the resolved prefix where the two do not meet."""
    path = embedding_path(decoder)
    key = verifier.weights.embed.key
    tail = f"{path}.weight"
    if path and (key == tail or key.endswith(f".{tail}")):
        return key[: -len(tail)].removesuffix(".")
    return verifier.prefix


def _from_pretrained(
    cls: type[PreTrainedModel],
    path: Path,
    text_config: PretrainedConfig,
    prefix: str,
    **kwargs: Any,
) -> tuple[PreTrainedModel, dict[str, Any]]:
    """``cls.from_pretrained`` of the keys under ``prefix``, with its loading info."""
    from transformers.utils import logging as hf_logging

    key_mapping = {f"^{re.escape(prefix)}\\.": ""} if prefix else None
    # Tensors outside the decoder are "unexpected" by design; keep the log quiet.
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        loaded: Any = cls.from_pretrained(
            str(path),
            config=text_config,
            key_mapping=key_mapping,
            output_loading_info=True,
            **kwargs,
        )
    finally:
        hf_logging.set_verbosity(verbosity)
    return loaded


def load_decoder(
    verifier: ResolvedVerifier,
    *,
    dtype: torch.dtype = torch.bfloat16,
    device: str | torch.device = "cpu",
    placement: Placement | None = None,
) -> PreTrainedModel:
    """The resolved verifier's text decoder with its weights, in eval mode.

    :param placement: spread the decoder over devices, CPU and disk with
        ``accelerate`` (``device`` is then ignored); see :class:`Placement`.
    :raises VerifierWeightsError: some of its weights are not under the prefix.
    """
    from speculators.utils.verifier_weights import VerifierWeightsError

    text_config, prefix = verifier.text_config, verifier.prefix
    trust_remote_code = verifier.trust_remote_code
    meta = meta_decoder(text_config, trust_remote_code=trust_remote_code)
    model, info = _from_pretrained(
        type(meta),
        verifier.path,
        text_config,
        _load_prefix(meta, verifier),
        dtype=dtype,
        trust_remote_code=trust_remote_code,
        **(
            placement.from_pretrained_kwargs()
            if placement is not None
            else {"device_map": None if str(device) == "cpu" else {"": str(device)}}
        ),
    )
    missing = list(info.get("missing_keys") or []) + [
        str(k) for k in info.get("mismatched_keys") or []
    ]
    if missing:
        raise VerifierWeightsError(
            f"decoder prefix {prefix!r} of {verifier.source}: {len(missing)} "
            f"text-model weight(s) not loaded from the checkpoint, e.g. "
            f"{sorted(missing)[:3]}. Choose the decoder with --verifier-weight-prefix."
        )
    model.eval()
    return model


def load_text_verifier(
    verifier: str | Path,
    *,
    dtype: torch.dtype = torch.bfloat16,
    device: str | torch.device = "cpu",
    trust_remote_code: bool = False,
    weight_overrides: Mapping[str, str | None] | None = None,
    placement: Placement | None = None,
) -> tuple[PreTrainedModel, PretrainedConfig, str]:
    """The verifier's text decoder with its weights, in eval mode: resolved
    (:func:`resolve_verifier`), then loaded (:func:`load_decoder`).

    :param weight_overrides: see :func:`decoder_weights`.
    :param placement: see :func:`load_decoder`.
    :returns: ``(decoder, text_config, decoder_prefix)``.
    :raises FileNotFoundError: ``verifier`` is not a local directory.
    :raises BrokenShardError: a shard of its weight map is missing or damaged.
    :raises VerifierWeightsError: the decoder cannot be located, or some of its
        weights are not under the prefix.
    """
    resolved = resolve_verifier(
        verifier, trust_remote_code=trust_remote_code, weight_overrides=weight_overrides
    )
    model = load_decoder(resolved, dtype=dtype, device=device, placement=placement)
    return model, resolved.text_config, resolved.prefix
