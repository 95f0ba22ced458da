"""Tiny random-weight verifiers of every family we support, built in one place.

The demo, the benchmarks, our tests and ``examples/train_tiny_llama.sh`` take
their verifiers from here, so each family's shape, key layout and tokenizer is
defined once:

* :mod:`.specs`: size knobs; :mod:`.tokenizer`: the word-level tokenizer with a
  chat template; :mod:`.configs`: each family's config as a dict;
  :mod:`.checkpoint`: safetensors writing (one file or shards + index), remote
  code, header-level skeletons.
* Families, each written the way it ships on the Hub and returned with the model
  it was written from (:class:`TinyCheckpoint`): :mod:`.dense` (Llama, Qwen3 tied,
  GPT-NeoX, Falcon), :mod:`.multimodal` (Gemma-3, Qwen2.5-VL, Llama-4,
  Qwen2.5-Omni), :mod:`.kimi` (Kimi-K2.5 and its variants, DeepSeek-V3 with MTP),
  :mod:`.hybrid` (Qwen3.5, Qwen3.5-MoE, Kimi-Linear, Nemotron-H; DeepSeek-V4).
* :mod:`.dataset`: a synthetic offline EAGLE-3 dataset (rendered by
  ``speculators prepare-data``; :mod:`speculators_kimi.datagen.fixture` adds the
  hidden states); :mod:`.train`: the ``speculators train`` command line, the one
  builder of it (the demo's train stage uses it too).

The package sits below the commands (``datagen``, ``evaluate``, ``doctor``,
``export``, ``demo``) and imports none of them. ``python -m
speculators_kimi.tiny_verifier OUT_DIR`` builds the tiny Llama and its dataset
under ``OUT_DIR`` and prints the ``speculators train`` command to run on them.

The patch units' own test helpers (``tests/unit/mock`` in the units) do not use
this package: they go upstream and must stand alone.
"""

from __future__ import annotations

from .checkpoint import (
    TinyCheckpoint,
    perturb_norms,
    remote_code,
    write_checkpoint,
    write_config,
    write_skeleton,
)
from .configs import (
    KIMI_ARCHITECTURE,
    dense_text,
    gemma3_config,
    kimi_k25_config,
    mla_text,
)
from .dataset import (
    default_target_layer_ids,
    prepare_data,
    prepare_synthetic_data,
    resolve_target_layer_ids,
    write_conversations,
)
from .dense import build_verifier, falcon, gpt_neox, llama, qwen3_tied
from .hybrid import deepseek_v4, kimi_linear, lfm2, nemotron_h, qwen3_5, qwen3_5_moe
from .kimi import (
    DECODER_PREFIX,
    HEAD_KEY,
    TEXT_PREFIX,
    build_kimi_tiny,
    deepseek_v3_mtp,
    kimi_k25,
    text_config,
    write_kimi_k25_skeleton,
)
from .multimodal import gemma3, llama4, qwen2_5_omni, qwen2_5_vl
from .specs import KimiTinySpec, TinyVerifierSpec
from .tokenizer import CHAT_TEMPLATE, SPECIAL_TOKENS, build_tokenizer, token_ids
from .train import TrainArgs, train_args, train_command

__all__ = [
    "CHAT_TEMPLATE",
    "DECODER_PREFIX",
    "HEAD_KEY",
    "KIMI_ARCHITECTURE",
    "SPECIAL_TOKENS",
    "TEXT_PREFIX",
    "KimiTinySpec",
    "TinyCheckpoint",
    "TinyVerifierSpec",
    "TrainArgs",
    "build_kimi_tiny",
    "build_tokenizer",
    "build_verifier",
    "deepseek_v3_mtp",
    "deepseek_v4",
    "default_target_layer_ids",
    "dense_text",
    "falcon",
    "gemma3",
    "gemma3_config",
    "gpt_neox",
    "kimi_k25",
    "kimi_k25_config",
    "kimi_linear",
    "lfm2",
    "llama",
    "llama4",
    "mla_text",
    "nemotron_h",
    "perturb_norms",
    "prepare_data",
    "prepare_synthetic_data",
    "qwen2_5_omni",
    "qwen2_5_vl",
    "qwen3_5",
    "qwen3_5_moe",
    "qwen3_tied",
    "remote_code",
    "resolve_target_layer_ids",
    "text_config",
    "token_ids",
    "train_args",
    "train_command",
    "write_checkpoint",
    "write_config",
    "write_conversations",
    "write_kimi_k25_skeleton",
    "write_skeleton",
]
