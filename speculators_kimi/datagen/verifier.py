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

import contextlib
import importlib
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel

__all__ = ["decoder_class", "decoder_prefix", "load_text_verifier"]


def decoder_prefix(
    verifier: Path,
    text_config: PretrainedConfig,
    *,
    trust_remote_code: bool = False,
    overrides: Mapping[str, str | None] | None = None,
) -> str:
    """The checkpoint prefix of the decoder's keys, exactly as training resolves it.

    :param overrides: ``prefix`` / ``embed_key`` / ``head_key`` / ``norm_key`` of
        :func:`resolve_verifier_weights` (the ``--verifier-*`` flags).
    :raises VerifierWeightsError: no decoder, or several, fit the text config.
    """
    from speculators.utils.verifier_weights import resolve_verifier_weights

    spec = resolve_verifier_weights(
        str(verifier),
        text_config=text_config,
        trust_remote_code=trust_remote_code,
        **{k: v for k, v in (overrides or {}).items() if v is not None},
    )
    return spec.prefix or ""


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


def decoder_class(
    text_config: PretrainedConfig, *, trust_remote_code: bool = False
) -> type[PreTrainedModel]:
    """The decoder class (base model, no head): ``AutoModel``, else the base model
    of ``AutoModelForCausalLM``, else the config's own module's model class."""
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
            return type(model.base_model)
    found = _module_decoder_class(text_config)
    if found is not None:
        return found
    raise TypeError(
        f"no text decoder class for {type(text_config).__name__} "
        f"(model_type {text_config.model_type!r}): {'; '.join(errors)}"
    )


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


def load_text_verifier(
    verifier: str | Path,
    *,
    dtype: torch.dtype = torch.bfloat16,
    device: str | torch.device = "cpu",
    trust_remote_code: bool = False,
    weight_overrides: Mapping[str, str | None] | None = None,
) -> tuple[PreTrainedModel, PretrainedConfig, str]:
    """The verifier's text decoder with its weights, in eval mode.

    :param weight_overrides: see :func:`decoder_prefix`.
    :returns: ``(decoder, text_config, decoder_prefix)``.
    :raises FileNotFoundError: ``verifier`` is not a local directory.
    :raises VerifierWeightsError: the decoder cannot be located, or some of its
        weights are not under the prefix.
    """
    from speculators.utils.text_config import load_text_config
    from speculators.utils.verifier_weights import VerifierWeightsError

    path = Path(verifier)
    if not path.is_dir():
        raise FileNotFoundError(
            f"verifier {verifier} is not a local directory (download it first, e.g. "
            "`hf download`)"
        )
    text_config = load_text_config(str(path), trust_remote_code=trust_remote_code)
    prefix = decoder_prefix(
        path,
        text_config,
        trust_remote_code=trust_remote_code,
        overrides=weight_overrides,
    )
    cls = decoder_class(text_config, trust_remote_code=trust_remote_code)
    model, info = _from_pretrained(
        cls,
        path,
        text_config,
        prefix,
        dtype=dtype,
        device_map=None if str(device) == "cpu" else {"": str(device)},
        trust_remote_code=trust_remote_code,
    )
    missing = list(info.get("missing_keys") or []) + [
        str(k) for k in info.get("mismatched_keys") or []
    ]
    if missing:
        raise VerifierWeightsError(
            f"decoder prefix {prefix!r} of {verifier}: {len(missing)} text-model "
            f"weight(s) not loaded from the checkpoint, e.g. {sorted(missing)[:3]}. "
            "Choose the decoder with --verifier-weight-prefix."
        )
    model.eval()
    return model, text_config, prefix
