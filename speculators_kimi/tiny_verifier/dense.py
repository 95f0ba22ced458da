"""Flat (single-tower) tiny verifiers, saved with ``save_pretrained`` as on the Hub.

Llama (``model.*``, separate head), Qwen3 (tied head: no ``lm_head.weight`` on
disk), GPT-NeoX (``gpt_neox.embed_in`` / ``embed_out`` / ``final_layer_norm``)
and Falcon (``transformer.word_embeddings`` / ``h`` / ``ln_f``, tied head).
"""

from __future__ import annotations

from pathlib import Path

from .checkpoint import TinyCheckpoint, save_pretrained, saved_keys
from .configs import dense_text
from .specs import TinyVerifierSpec
from .tokenizer import build_tokenizer, token_ids

__all__ = ["build_verifier", "falcon", "gpt_neox", "llama", "qwen3_tied"]


def llama(spec: TinyVerifierSpec, out_dir: Path) -> TinyCheckpoint:
    """A random-weight tiny ``LlamaForCausalLM`` and its tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer(spec)
    config = LlamaConfig(
        **dense_text(token_ids(tokenizer), spec, max_position_embeddings=4096)
    )
    model = save_pretrained(
        out_dir, LlamaForCausalLM, config, tokenizer, seed=spec.seed, perturb=False
    )
    return TinyCheckpoint(out_dir, model, model.model.norm)


def build_verifier(spec: TinyVerifierSpec, out_dir: Path) -> Path:
    """Save a random-weight tiny Llama and its tokenizer under ``out_dir``."""
    return llama(spec, out_dir).path


def qwen3_tied(out: Path) -> TinyCheckpoint:
    """Qwen3 with a tied head: no ``lm_head.weight`` on disk."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tok = build_tokenizer(TinyVerifierSpec())
    cfg = Qwen3Config(
        **dense_text(token_ids(tok), head_dim=16, tie_word_embeddings=True)
    )
    model = save_pretrained(out, Qwen3ForCausalLM, cfg, tok, seed=1, perturb=False)
    assert "lm_head.weight" not in saved_keys(out)
    return TinyCheckpoint(out, model, model.model.norm)


def gpt_neox(out: Path) -> TinyCheckpoint:
    """GPT-NeoX: ``gpt_neox.embed_in``, ``embed_out``, ``final_layer_norm``."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    tok = build_tokenizer(TinyVerifierSpec())
    d = dense_text(token_ids(tok))
    d.pop("num_key_value_heads")
    model = save_pretrained(out, GPTNeoXForCausalLM, GPTNeoXConfig(**d), tok, seed=13)
    return TinyCheckpoint(out, model, model.gpt_neox.final_layer_norm)


def falcon(out: Path) -> TinyCheckpoint:
    """Falcon-7B style: ``transformer.word_embeddings``/``h``/``ln_f``, tied head."""
    from transformers import FalconConfig, FalconForCausalLM

    tok = build_tokenizer(TinyVerifierSpec())
    d = dense_text(token_ids(tok), tie_word_embeddings=True)
    for key in ("intermediate_size", "num_key_value_heads"):
        d.pop(key)
    model = save_pretrained(out, FalconForCausalLM, FalconConfig(**d), tok, seed=14)
    assert "lm_head.weight" not in saved_keys(out)
    return TinyCheckpoint(out, model, model.transformer.ln_f)
