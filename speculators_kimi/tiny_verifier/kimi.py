"""Kimi-K2.5-shaped and DeepSeek-V3 tiny verifiers (MLA attention + MoE layers).

The Kimi checkpoint has the layout of ``moonshotai/Kimi-K2.5``: a nested
``config.json`` (``kimi_k25`` around a DeepSeek-V3 ``text_config`` written as
``kimi_k2``), weights under ``language_model.model.*`` /
``language_model.lm_head.weight`` plus a small ``vision_tower.*`` /
``mm_projector.*`` that text-only paths must ignore, and the tiny tokenizer.
Variants: sharded, with remote code (``auto_map``) in the checkpoint, and a
header-level skeleton for checks that read no tensor data.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from .checkpoint import (
    TinyCheckpoint,
    perturb_norms,
    remote_code,
    save_pretrained,
    write_checkpoint,
    write_config,
    write_skeleton,
)
from .configs import kimi_k25_config, mla_text
from .specs import KimiTinySpec, TinyVerifierSpec
from .tokenizer import build_tokenizer, token_ids

__all__ = [
    "DECODER_PREFIX",
    "HEAD_KEY",
    "TEXT_PREFIX",
    "build_kimi_tiny",
    "deepseek_v3_mtp",
    "kimi_k25",
    "text_config",
    "write_kimi_k25_skeleton",
]

TEXT_PREFIX = "language_model."
DECODER_PREFIX = "language_model.model"
HEAD_KEY = "language_model.lm_head.weight"
LM_HEAD_SCALE = 25.0
_VISION_HIDDEN = 32
#: The Hub's remote-code classes of Kimi-K2.5.
_KIMI_CLASSES = {
    "AutoConfig": "configuration_kimi_k25.KimiK25Config",
    "AutoModel": "modeling_kimi_k25.KimiK25ForConditionalGeneration",
    "AutoModelForCausalLM": "modeling_kimi_k25.KimiK25ForConditionalGeneration",
}


def text_config(spec: KimiTinySpec, **token_ids: Any) -> Any:
    """The DeepSeek-V3 text config (tiny MLA + MoE), a ``DeepseekV3Config``."""
    from transformers import DeepseekV3Config

    return DeepseekV3Config(**mla_text(spec, **token_ids))


def _vision_decoys(spec: KimiTinySpec) -> dict[str, torch.Tensor]:
    """A vision tower and projector, with a look-alike of the final norm's name."""
    return {
        "vision_tower.patch_embed.proj.weight": torch.randn(_VISION_HIDDEN, 3, 14, 14),
        "vision_tower.encoder.final_layernorm.weight": torch.ones(_VISION_HIDDEN),
        "mm_projector.proj.0.weight": torch.randn(spec.hidden_size, _VISION_HIDDEN * 4),
    }


def _shards(tensors: Mapping[str, torch.Tensor]) -> list[list[str]]:
    """Four shards: embedding first, layers 0-1, the rest, head and final norm."""
    pre = f"{DECODER_PREFIX}."
    first = [pre + "embed_tokens.weight"]
    last = [HEAD_KEY, pre + "norm.weight"]
    middle = [
        k for k in tensors if k.startswith((pre + "layers.0.", pre + "layers.1."))
    ]
    rest = [k for k in tensors if k not in {*first, *middle, *last}]
    return [first, middle, rest, last]


def kimi_k25(
    out: Path,
    spec: KimiTinySpec | None = None,
    words: Sequence[str] = (),
    *,
    perturb: bool = False,
    sharded: bool = False,
    remote: bool = False,
) -> TinyCheckpoint:
    """Write the tiny Kimi-K2.5-shaped checkpoint and tokenizer to ``out``.

    :param words: go first into the tokenizer's vocabulary (a dataset's words).
    :param perturb: final norms away from ones, so a wrong norm shows.
    :param sharded: four shards (see :func:`_shards`) instead of one file.
    :param remote: ``auto_map`` to code in the checkpoint that writes
        ``<out>.imported`` when imported (nothing may import it).
    """
    from transformers import DeepseekV3ForCausalLM

    spec = spec or KimiTinySpec()
    torch.manual_seed(spec.seed)
    tokenizer = build_tokenizer(spec.tokenizer_spec, words)
    tokenizer.model_max_length = spec.max_position_embeddings
    tokens = token_ids(tokenizer)
    cfg = text_config(spec, **tokens)
    model = DeepseekV3ForCausalLM(cfg).eval()
    # A peaked output distribution (as a trained model has) gives the draft a
    # target it can visibly learn; the default init makes it nearly uniform.
    with torch.no_grad():
        model.lm_head.weight.mul_(LM_HEAD_SCALE)
    if perturb:
        perturb_norms(model, spec.seed + 1)
    tensors = {TEXT_PREFIX + k: v for k, v in model.state_dict().items()}
    tensors.update(_vision_decoys(spec))
    marker = out.parent / f"{out.name}.imported" if remote else None
    auto_map = remote_code(out, marker, _KIMI_CLASSES) if marker else None
    text = {**cfg.to_dict(), "architectures": ["DeepseekV3ForCausalLM"]}
    write_config(out, kimi_k25_config(text, tokens=tokens, auto_map=auto_map))
    write_checkpoint(out, tensors, _shards(tensors) if sharded else None)
    tokenizer.save_pretrained(out)
    return TinyCheckpoint(out, model, model.model.norm, marker)


def build_kimi_tiny(
    out_dir: Path, spec: KimiTinySpec | None = None, words: Sequence[str] = ()
) -> Path:
    """The demo's verifier: :func:`kimi_k25` in one file, as initialized."""
    return kimi_k25(out_dir, spec, words).path


def deepseek_v3_mtp(out: Path, *, per_expert: bool = False) -> TinyCheckpoint:
    """DeepSeek-V3 (MLA + MoE) with an MTP layer ``model.layers.<N>.*`` on disk.

    :param per_expert: keep the Hub's per-expert layout that ``save_pretrained``
        writes (``mlp.experts.<e>.gate_proj.weight`` ..., what DeepSeek-V3 and
        Kimi-K2.5 ship); default: transformers' fused-expert layout.
    """
    from safetensors.torch import load_file
    from transformers import DeepseekV3ForCausalLM

    dense = TinyVerifierSpec()
    tok = build_tokenizer(dense)
    spec = KimiTinySpec(hidden_size=dense.hidden_size, num_words=dense.num_words)
    cfg = text_config(spec, **token_ids(tok))
    model = save_pretrained(out, DeepseekV3ForCausalLM, cfg, tok, seed=11)
    if per_expert:
        tensors = load_file(out / "model.safetensors")
    else:
        tensors = {k: v.clone() for k, v in model.state_dict().items()}
    # The MTP module: a full decoder layer plus its own embed/head/norms, all
    # shaped like the verifier's (what a suffix or shape match could pick).
    hidden, layers = spec.hidden_size, spec.num_layers
    last, mtp = f"model.layers.{layers - 1}.", f"model.layers.{layers}."
    gen = torch.Generator().manual_seed(12)
    for key in [k for k in tensors if k.startswith(last)]:
        tensors[mtp + key[len(last) :]] = torch.randn(tensors[key].shape, generator=gen)
    for name, shape in {
        "embed_tokens.weight": (cfg.vocab_size, hidden),
        "shared_head.head.weight": (cfg.vocab_size, hidden),
        "shared_head.norm.weight": (hidden,),
        "enorm.weight": (hidden,),
        "hnorm.weight": (hidden,),
        "eh_proj.weight": (hidden, 2 * hidden),
    }.items():
        tensors[mtp + name] = torch.randn(shape, generator=gen)
    write_checkpoint(out, tensors, None)
    config = json.loads((out / "config.json").read_text())
    write_config(out, {**config, "num_nextn_predict_layers": 1})
    return TinyCheckpoint(out, model, model.model.norm)


def write_kimi_k25_skeleton(
    path: Path,
    text: dict[str, Any],
    *,
    head: Mapping[str, torch.Tensor] | None = None,
    norm: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float32,
    auto_map: dict[str, str] | None = None,
) -> Path:
    """Kimi-K2.5's Hub layout with only the tensors a header-level reader needs.

    Three shards (embedding | layer norms and a vision tower | final norm and
    head); see :func:`.checkpoint.write_skeleton`.

    :param text: the text config (:func:`.configs.mla_text`, any sizes).
    :param head: replaces ``{HEAD_KEY: random}`` (two heads, a packed one, NaN).
    """
    config = kimi_k25_config(text, tie_word_embeddings=True, auto_map=auto_map)
    decoys = {
        f"vision_tower.encoder.blocks.{i}.norm.weight": torch.ones(
            _VISION_HIDDEN, dtype=dtype
        )
        for i in range(2)
    }
    return write_skeleton(
        path,
        config,
        prefix=DECODER_PREFIX,
        head_key=HEAD_KEY,
        decoys=decoys,
        head=head,
        norm=norm,
        dtype=dtype,
    )
