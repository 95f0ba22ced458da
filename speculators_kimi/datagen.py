"""Hidden states for upstream's offline EAGLE-3 trainer, computed with transformers.

``speculators-kimi generate-hidden-states --verifier V --data-path D`` reads the
dataset directory written by upstream's ``speculators prepare-data`` (``input_ids``,
``loss_mask``, ``seq_len``), runs the verifier's **text** model on CPU or one GPU,
and writes ``D/hidden_states/hs_<i>.safetensors`` with ``hidden_states``
``[seq, n_aux + 1, hidden]`` and ``token_ids`` ``[seq]`` (the row's ``input_ids``):
the layout upstream's trainer reads (``--data-path D``, ``--on-missing raise``).

Conventions (vLLM's): the entry for aux layer id ``i`` is the residual stream
entering decoder layer ``i`` (``i == num_layers``: the output of the last layer);
the last entry is the final hidden state *before* the final norm, so
``lm_head(norm(last))`` is the verifier's own logits.

Nested verifiers (Kimi-K2.5, Qwen-VL, Qwen-Omni, Llama-4, Gemma-3, ...) run
text-only: the text config comes from
:func:`speculators.utils.text_config.load_text_config` (no remote code unless
asked), and only the text **decoder** is built (the base model: embedding, layers,
final norm; hidden states need no output head). Its weights are read by
transformers' ``from_pretrained`` from the checkpoint keys under the decoder prefix
``P`` for which ``P + key`` exists, with the decoder's shapes, for every decoder
key (``language_model.model.`` for Kimi-K2.5, ``model.`` for Llama, ``transformer.``
for Falcon, ``thinker.model.`` for Qwen2.5-Omni), so transformers' load-time
conversions apply (the Hub's per-expert MoE weights are fused). Other tensors
(vision / audio / talker towers, output heads, MTP layers) stay out of the model.

Generation is resumable: finished files are checked (header shapes, dtype, layer
ids and token ids) and kept; missing, truncated or stale ones are redone. Files are
written to a temporary name and renamed atomically. Batches are formed from the
whole dataset by length, independent of what is already on disk, so a resumed run
writes the same bytes as an uninterrupted one.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import json
import os
import re
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors import safe_open
from safetensors.torch import save

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from transformers import PretrainedConfig, PreTrainedModel

__all__ = [
    "ContextLengthError",
    "WeightPrefixError",
    "capture_hidden_states",
    "default_target_layer_ids",
    "find_decoder_prefix",
    "generate_hidden_states",
    "load_text_verifier",
    "main",
    "plan_batches",
]

HS_DIRNAME = "hidden_states"
_META_KEY = "speculators_kimi"
_ST_DTYPES = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32"}
_DTYPES = {
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float32": torch.float32,
}


class WeightPrefixError(ValueError):
    """The text decoder's weights cannot be located unambiguously in the checkpoint."""


class ContextLengthError(ValueError):
    """A sample is longer than the verifier's context window."""


# --------------------------------------------------------------------------- weights


def _prefix_candidates(ckpt: set[str], key: str) -> list[str]:
    """Prefixes ``P`` (empty or ending in ``.``) with ``P + key`` in ``ckpt``."""
    return sorted(
        {
            c[: -len(key)]
            for c in ckpt
            if c.endswith(key) and (len(c) == len(key) or c[-len(key) - 1] == ".")
        }
    )


def _fitting(
    ckpt: set[str],
    keys: Sequence[str],
    anchor: str,
    shapes: tuple[Mapping[str, tuple], Mapping[str, tuple]] | None = None,
) -> tuple[list[str], dict[str, list[str]]]:
    fits, misses = [], {}
    for prefix in _prefix_candidates(ckpt, anchor):
        missing = [k for k in keys if prefix + k not in ckpt]
        if not missing and shapes is not None:
            ckpt_shapes, model_shapes = shapes
            missing = [
                f"{k} (shape {tuple(model_shapes[k])}, not "
                f"{tuple(ckpt_shapes[prefix + k])})"
                for k in keys
                if k in model_shapes
                and prefix + k in ckpt_shapes
                and tuple(ckpt_shapes[prefix + k]) != tuple(model_shapes[k])
            ]
        if missing:
            misses[prefix] = missing
        else:
            fits.append(prefix)
    return fits, misses


def find_decoder_prefix(
    checkpoint_keys: Iterable[str],
    model_keys: Sequence[str],
    *,
    optional_keys: Iterable[str] = (),
    base_prefix: str = "model.",
    checkpoint_shapes: Mapping[str, tuple] | None = None,
    model_shapes: Mapping[str, tuple] | None = None,
) -> tuple[str, str]:
    """Where the text model's weights live in the checkpoint.

    The text model's keys are ``base_prefix + k`` (the decoder: embedding, layers,
    final norm) and head keys (``lm_head.weight``). Returns ``(decoder, head)``:
    checkpoint key = ``decoder + k`` for decoder keys and ``head + key`` for head
    keys. Kimi-K2.5: ``("language_model.model.", "language_model.")``; a flat
    verifier: ``("model.", "")``; transformers-5 VLM layouts (Gemma-3, Qwen-VL):
    ``("model.language_model.", "")``.

    :param checkpoint_keys: tensor names in the checkpoint.
    :param model_keys: the text model's state-dict keys.
    :param optional_keys: keys that may be absent (a tied output head).
    :param checkpoint_shapes: tensor shapes in the checkpoint; with
        ``model_shapes`` (the text model's, by model key), a prefix whose tensors
        have other shapes does not fit (Qwen2.5-Omni's talker next to its thinker).
    :raises WeightPrefixError: nothing or several things fit; the message lists
        the candidates and what each one lacks.
    """
    ckpt = set(checkpoint_keys)
    optional = set(optional_keys)
    required = [k for k in model_keys if k not in optional]
    base = [k[len(base_prefix) :] for k in required if k.startswith(base_prefix)]
    head = [k for k in required if not k.startswith(base_prefix)]
    if not base:
        raise WeightPrefixError("the text model has no decoder weights to load")
    anchor = next((k for k in base if k.endswith("embed_tokens.weight")), base[0])
    shapes = None
    if checkpoint_shapes is not None and model_shapes is not None:
        shapes = (
            checkpoint_shapes,
            {
                k[len(base_prefix) :]: v
                for k, v in model_shapes.items()
                if k.startswith(base_prefix)
            },
        )
    fits, misses = _fitting(ckpt, base, anchor, shapes)
    if not fits:
        if not misses:
            raise WeightPrefixError(
                f"no checkpoint tensor ends with {anchor!r}; the checkpoint does "
                f"not hold this text model's weights (first keys: {sorted(ckpt)[:8]})"
            )
        details = "; ".join(
            f"{p!r} lacks {len(m)} key(s), e.g. {m[:3]}" for p, m in misses.items()
        )
        raise WeightPrefixError(
            f"no decoder prefix holds every text-model weight. Candidates: {details}. "
            "Quantized checkpoint layouts are not read by this loader; use "
            "upstream's vLLM hidden-state path for them."
        )
    if len(fits) > 1:
        # Prefer the shallowest: per-layer copies (MTP) or towers nest deeper.
        raise WeightPrefixError(
            "several decoder prefixes hold every text-model weight: "
            + ", ".join(repr(p) for p in fits)
            + "; pass --weight-prefix to choose one"
        )
    decoder = fits[0]
    if not head:
        return decoder, ""
    head_fits, head_misses = _fitting(ckpt, head, head[0])
    if len(head_fits) > 1:
        # The head that sits beside the decoder: Kimi's ``language_model.`` for
        # ``language_model.model.``; the top level for ``model.language_model.``.
        near = [p for p in head_fits if decoder in (p + base_prefix, f"{p}model.")]
        near = near or [p for p in head_fits if decoder.startswith(p)]
        head_fits = [max(near, key=len)] if near else head_fits
    if len(head_fits) != 1:
        found = head_fits or list(head_misses)
        raise WeightPrefixError(
            f"cannot locate the output head {head} for decoder prefix {decoder!r}; "
            f"candidates: {found}"
        )
    return decoder, head_fits[0]


def _converted_patterns(model: PreTrainedModel) -> list[re.Pattern[str]]:
    """Model keys that transformers' load-time conversions produce (fused experts).

    Such keys have no literal counterpart in a checkpoint that keeps the Hub's
    layout (``mlp.experts.<e>.gate_proj.weight`` ...), so they are left out of the
    prefix search; transformers converts them while loading.
    """
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping

        transforms = get_model_conversion_mapping(model)
    except Exception:
        return []
    patterns = []
    for transform in transforms or []:
        for target in getattr(transform, "target_patterns", None) or []:
            text = re.escape(str(target)).replace(r"\*", r"[^.]+").replace(r"\$", "$")
            patterns.append(re.compile(text))
    return patterns


def _decoder_class(
    text_config: PretrainedConfig, *, trust_remote_code: bool
) -> type[PreTrainedModel]:
    """The class of the text decoder (base model, no output head) for the config."""
    from transformers import AutoModel, AutoModelForCausalLM, PreTrainedModel
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
    # A text config without Auto mapping (Qwen2.5-Omni's thinker text model): the
    # model class of the same transformers module that takes exactly this config.
    module = sys.modules.get(
        type(text_config).__module__.replace(".configuration_", ".modeling_")
    )
    if module is None:
        with contextlib.suppress(ImportError):
            module = importlib.import_module(
                type(text_config).__module__.replace(".configuration_", ".modeling_")
            )
    found = (
        [
            cls
            for cls in vars(module).values()
            if isinstance(cls, type)
            and issubclass(cls, PreTrainedModel)
            and getattr(cls, "config_class", None) is type(text_config)
            and cls.__name__.endswith("Model")
        ]
        if module is not None
        else []
    )
    if len(found) == 1:
        return found[0]
    raise TypeError(
        f"no text decoder class for {type(text_config).__name__} "
        f"(model_type {text_config.model_type!r}): {'; '.join(errors)}"
    )


def _checkpoint_shapes(path: Path, weight_map: dict[str, str]) -> dict[str, tuple]:
    """Tensor shapes from the shards' safetensors headers (no tensor data read)."""
    from speculators.utils.verifier_weights import read_safetensors_header

    return {
        key: tuple(entry["shape"])
        for file in sorted(set(weight_map.values()))
        for key, entry in read_safetensors_header(path / file).items()
    }


def load_text_verifier(
    verifier: str | Path,
    *,
    dtype: torch.dtype = torch.bfloat16,
    device: str | torch.device = "cpu",
    trust_remote_code: bool = False,
    weight_prefix: str | None = None,
) -> tuple[PreTrainedModel, PretrainedConfig, str]:
    """The verifier's text decoder (no output head) with its weights, in eval mode.

    Hidden states need only the decoder: the embedding, the layers and the final
    norm. The decoder class comes from the text config (``AutoModel``, else the
    base model of ``AutoModelForCausalLM``, else the model class of the config's
    own transformers module); its weights are read by transformers from the
    checkpoint keys under the decoder prefix, so transformers' load-time key
    conversions apply (per-expert MoE weights fused, ...). Tensors outside the
    prefix (vision / audio / talker towers, output heads) are not used.

    :returns: ``(decoder, text_config, decoder_prefix)``; ``decoder_prefix`` is
        where the decoder's keys live (``language_model.model.`` for Kimi-K2.5,
        ``model.`` for Llama, ``transformer.`` for Falcon).
    :raises WeightPrefixError: the decoder weights are not (all) in the checkpoint.
    """
    from speculators.utils.text_config import load_text_config
    from speculators.utils.verifier_weights import read_weight_index

    path = Path(verifier)
    if not path.is_dir():
        raise FileNotFoundError(
            f"verifier {verifier} is not a local directory (download it first, e.g. "
            "`hf download`)"
        )
    text_config = load_text_config(str(path), trust_remote_code=trust_remote_code)
    from transformers.initialization import no_init_weights

    cls = _decoder_class(text_config, trust_remote_code=trust_remote_code)
    with no_init_weights(), torch.device("meta"):
        skeleton = cls(text_config)
    shapes = {k: tuple(v.shape) for k, v in skeleton.state_dict().items()}
    converted = _converted_patterns(skeleton)
    del skeleton
    literal = [k for k in shapes if not any(p.search(k) for p in converted)]
    weight_map = read_weight_index(path)
    if weight_prefix is None:
        ckpt_shapes = _checkpoint_shapes(path, weight_map)
        decoder, _ = find_decoder_prefix(
            weight_map,
            [f"model.{k}" for k in literal],
            checkpoint_shapes=ckpt_shapes,
            model_shapes={f"model.{k}": shapes[k] for k in literal},
        )
    else:
        decoder = weight_prefix
        absent = [decoder + k for k in literal if decoder + k not in weight_map]
        if absent:
            raise WeightPrefixError(
                f"weight prefix {decoder!r}: {len(absent)} text-model weight(s) "
                f"missing from the checkpoint, e.g. {absent[:3]}"
            )
    from transformers.utils import logging as hf_logging

    key_mapping = {f"^{re.escape(decoder)}": ""} if decoder else None
    # Tensors outside the decoder are "unexpected" by design; keep the log quiet.
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        loaded: Any = cls.from_pretrained(
            str(path),
            config=text_config,
            dtype=dtype,
            key_mapping=key_mapping,
            device_map=None if str(device) == "cpu" else {"": str(device)},
            trust_remote_code=trust_remote_code,
            output_loading_info=True,
        )
    finally:
        hf_logging.set_verbosity(verbosity)
    model, info = loaded
    missing = list(info.get("missing_keys") or []) + [
        str(k) for k in info.get("mismatched_keys") or []
    ]
    if missing:
        raise WeightPrefixError(
            f"weight prefix {decoder!r}: {len(missing)} text-model weight(s) not "
            f"loaded from the checkpoint, e.g. {sorted(missing)[:3]}"
        )
    model.eval()
    return model, text_config, decoder


# --------------------------------------------------------------------------- capture

_LAYER_NAMES = ("layers", "h", "blocks", "layer")
_NORM_NAMES = ("norm", "ln_f", "final_layer_norm", "norm_f", "final_layernorm")


def _decoder_parts(
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
        raise TypeError(
            f"{type(model).__name__}: expected a decoder with one layer list "
            f"({'/'.join(_LAYER_NAMES)}) of num_hidden_layers={n_layers} layers and "
            f"one final norm ({'/'.join(_NORM_NAMES)})"
        )
    return layers[0], norms[0]


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

    Forward pre-hooks record the residual stream entering decoder layer ``i``
    (id ``num_layers``: the input of the final norm) and, as the last entry, the
    input of the final norm (the final hidden state before the norm).
    """
    layers, norm = _decoder_parts(model)
    captured: dict[int, torch.Tensor] = {}

    def grab(key: int):
        def hook(_module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
            hs = args[0] if args else kwargs["hidden_states"]
            captured[key] = hs.detach()

        return hook

    final_key = -1
    handles = []
    for i in sorted(set(layer_ids)):
        if i < len(layers):
            module: torch.nn.Module = layers[i]
        elif i == len(layers):
            module = norm
        else:
            raise ValueError(f"layer id {i} > number of layers {len(layers)}")
        handles.append(module.register_forward_pre_hook(grab(i), with_kwargs=True))
    handles.append(norm.register_forward_pre_hook(grab(final_key), with_kwargs=True))
    kwargs: dict[str, Any] = {}
    if "logits_to_keep" in inspect.signature(model.forward).parameters:
        kwargs["logits_to_keep"] = 0 if return_logits else 1
    elif return_logits:
        raise TypeError(f"{type(model).__name__} has no output head for logits")
    try:
        out = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            use_cache=False,
            **kwargs,
        )
    finally:
        for h in handles:
            h.remove()
    hs = torch.stack([captured[i] for i in [*layer_ids, final_key]], dim=2)
    return hs, (out.logits if return_logits else None)


# --------------------------------------------------------------------------- planning


def default_target_layer_ids(
    verifier: str | Path,
    target_layer_ids: Sequence[int] | None = None,
    *,
    trust_remote_code: bool = False,
) -> list[int]:
    """Aux layer ids exactly as upstream's trainer resolves them for ``verifier``."""
    from speculators.models.utils import resolve_target_layer_ids

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(
            resolve_target_layer_ids(
                list(target_layer_ids) if target_layer_ids is not None else None,
                str(verifier),
                trust_remote_code=trust_remote_code,
            )
        )


def plan_batches(
    lengths: Sequence[int], *, batch_size: int, max_batch_tokens: int
) -> list[list[int]]:
    """Sample indices grouped by length (longest first); depends only on ``lengths``."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    for idx in order:
        # Sorted longest first: the batch's padded length is its first sample's.
        width = lengths[current[0]] if current else lengths[idx]
        if current and (
            len(current) >= batch_size or width * (len(current) + 1) > max_batch_tokens
        ):
            batches.append(current)
            current = []
        current.append(idx)
    if current:
        batches.append(current)
    return batches


def _hs_path(out_dir: Path, idx: int) -> Path:
    return out_dir / f"hs_{idx}.safetensors"


def _is_complete(
    path: Path,
    token_ids: Sequence[int],
    *,
    num_entries: int,
    hidden_size: int,
    dtype: torch.dtype,
    layer_ids: Sequence[int],
) -> bool:
    """Whether ``path`` is a finished, matching file (reads header + token ids)."""
    if not path.is_file():
        return False
    try:
        with safe_open(str(path), framework="pt") as f:
            if set(f.keys()) != {"hidden_states", "token_ids"}:
                return False
            meta = json.loads((f.metadata() or {}).get(_META_KEY, "{}"))
            if meta.get("target_layer_ids") != list(layer_ids):
                return False
            hs = f.get_slice("hidden_states")
            if list(hs.get_shape()) != [len(token_ids), num_entries, hidden_size]:
                return False
            if hs.get_dtype() != _ST_DTYPES.get(dtype):
                return False
            tok = f.get_tensor("token_ids")
        return tok.tolist() == list(token_ids)
    except Exception:
        return False


def _write_atomic(path: Path, tensors: dict[str, torch.Tensor], meta: dict) -> None:
    # Serialized here and written under our own temporary name: save_file's own
    # temporary file (``.tmpXXXXXX``) would survive a killed run.
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(save(tensors, metadata=meta))
    tmp.replace(path)


def _check_context(lengths: Sequence[int], limit: int | None) -> None:
    if not limit:
        return
    for idx, n in enumerate(lengths):
        if n > limit:
            raise ContextLengthError(
                f"sample {idx} has {n} tokens, more than the verifier's context "
                f"(max_position_embeddings={limit}); re-run prepare-data with "
                f"--seq-length {limit} or less"
            )


@dataclass
class GenerationResult:
    """What one call of :func:`generate_hidden_states` did."""

    output_dir: Path
    target_layer_ids: list[int]
    written: int
    skipped: int
    prefix: str


def _pick_device(device: str) -> str:
    if device != "auto":
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


def generate_hidden_states(
    verifier: str | Path,
    data_path: str | Path,
    *,
    output_dir: str | Path | None = None,
    target_layer_ids: Sequence[int] | None = None,
    dtype: torch.dtype | str = torch.bfloat16,
    device: str = "auto",
    batch_size: int = 8,
    max_batch_tokens: int = 16384,
    trust_remote_code: bool = False,
    weight_prefix: str | None = None,
    progress: bool = True,
    overwrite: bool = False,
) -> GenerationResult:
    """Write ``hs_<i>.safetensors`` for every row of the prepare-data dataset."""
    from datasets import load_from_disk
    from speculators.utils.text_config import load_text_config
    from tqdm.auto import tqdm

    if isinstance(dtype, str):
        dtype = _DTYPES[dtype]
    data_path = Path(data_path)
    out_dir = Path(output_dir) if output_dir is not None else data_path / HS_DIRNAME
    dataset = load_from_disk(str(data_path)).with_format(None)
    all_ids: list[list[int]] = [list(map(int, r)) for r in dataset["input_ids"]]
    lengths = [len(ids) for ids in all_ids]

    text_config = load_text_config(str(verifier), trust_remote_code=trust_remote_code)
    _check_context(lengths, getattr(text_config, "max_position_embeddings", None))
    layer_ids = default_target_layer_ids(
        verifier, target_layer_ids, trust_remote_code=trust_remote_code
    )
    num_entries = len(layer_ids) + 1
    hidden = int(text_config.hidden_size)

    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob(".hs_*.tmp*"):
        stale.unlink(missing_ok=True)

    def done(i: int) -> bool:
        return not overwrite and _is_complete(
            _hs_path(out_dir, i),
            all_ids[i],
            num_entries=num_entries,
            hidden_size=hidden,
            dtype=dtype,
            layer_ids=layer_ids,
        )

    batches = plan_batches(
        lengths, batch_size=batch_size, max_batch_tokens=max_batch_tokens
    )
    todo = [[i for i in b if not done(i)] for b in batches]
    pending = sum(len(t) for t in todo)
    skipped = len(all_ids) - pending
    result = GenerationResult(out_dir, layer_ids, 0, skipped, "")
    if pending == 0:
        return result

    dev = _pick_device(device)
    model, _, prefix = load_text_verifier(
        verifier,
        dtype=dtype,
        device=dev,
        trust_remote_code=trust_remote_code,
        weight_prefix=weight_prefix,
    )
    result.prefix = prefix
    # One metadata entry: safetensors writes several in hash order, which would
    # make the bytes differ between runs.
    info = {"target_layer_ids": layer_ids, "verifier_prefix": prefix}
    meta = {_META_KEY: json.dumps(info, sort_keys=True)}
    bar = tqdm(
        total=len(all_ids),
        initial=skipped,
        desc="hidden states",
        unit="sample",
        disable=not progress,
        file=sys.stderr,
    )
    with bar:
        for batch, missing in zip(batches, todo, strict=True):
            if not missing:
                continue
            # The whole planned batch is recomputed so results do not depend on
            # which of its files survived an interruption.
            width = max(lengths[i] for i in batch)
            ids = torch.zeros(len(batch), width, dtype=torch.long)
            mask = torch.zeros(len(batch), width, dtype=torch.long)
            for row, i in enumerate(batch):
                ids[row, : lengths[i]] = torch.tensor(all_ids[i])
                mask[row, : lengths[i]] = 1
            hs, _ = capture_hidden_states(
                model, ids.to(dev), layer_ids, attention_mask=mask.to(dev)
            )
            hs = hs.to("cpu")
            for row, i in enumerate(batch):
                if i not in missing:
                    continue
                _write_atomic(
                    _hs_path(out_dir, i),
                    {
                        "hidden_states": hs[row, : lengths[i]].contiguous(),
                        "token_ids": torch.tensor(all_ids[i], dtype=torch.long),
                    },
                    meta,
                )
                result.written += 1
                bar.update(1)
    return result


# --------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``generate-hidden-states`` options."""
    parser.add_argument(
        "--verifier",
        "--verifier-name-or-path",
        dest="verifier",
        required=True,
        help="local verifier directory (config.json + safetensors)",
    )
    parser.add_argument(
        "--data-path",
        required=True,
        help="output directory of `speculators prepare-data`",
    )
    parser.add_argument(
        "--output-dir",
        default=None,
        help="where hs_<i>.safetensors go (default: DATA_PATH/hidden_states)",
    )
    parser.add_argument(
        "--target-layer-ids",
        type=int,
        nargs="+",
        default=None,
        help="aux layer ids (default: upstream trainer's [2, n//2, n-3]); pass "
        "the same ids to `speculators train`",
    )
    parser.add_argument("--dtype", choices=sorted(_DTYPES), default="bfloat16")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument(
        "--max-batch-tokens",
        type=int,
        default=16384,
        help="upper bound on padded tokens per batch",
    )
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument(
        "--weight-prefix",
        default=None,
        help="checkpoint key prefix of the text decoder's `model.` keys, e.g. "
        "'language_model.model.' (default: found from the checkpoint)",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="redo files that are complete"
    )
    parser.add_argument("--no-progress", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Run ``generate-hidden-states`` from parsed arguments."""
    from speculators.utils.cli_errors import check_model_source

    check_model_source(args.verifier, "--verifier")
    try:
        res = generate_hidden_states(
            args.verifier,
            args.data_path,
            output_dir=args.output_dir,
            target_layer_ids=args.target_layer_ids,
            dtype=args.dtype,
            device=args.device,
            batch_size=args.batch_size,
            max_batch_tokens=args.max_batch_tokens,
            trust_remote_code=args.trust_remote_code,
            weight_prefix=args.weight_prefix,
            progress=not args.no_progress,
            overwrite=args.overwrite,
        )
    except (ContextLengthError, WeightPrefixError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(
        f"hidden states: {res.output_dir} ({res.written} written, {res.skipped} "
        f"already complete); target layer ids {res.target_layer_ids}"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m speculators_kimi.datagen``: the generate-hidden-states command."""
    from .cli import command_main

    return command_main("generate-hidden-states", argv)


if __name__ == "__main__":
    raise SystemExit(main())
