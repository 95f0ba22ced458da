"""Tiny real verifier checkpoints in the key layouts their families ship on the Hub.

Each builder instantiates the verifier with transformers (tiny sizes, random
weights, final norms perturbed away from their identity init), writes it the way
the Hub has it (``save_pretrained`` where that gives the Hub layout, hand-written
safetensors + ``config.json`` elsewhere, with decoy towers: vision, talker, MTP)
and returns a :class:`Member`: the directory plus the embedding, output head and
final norm module that the instantiated verifier itself uses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file, save_file

from speculators_kimi.kimi_tiny import (
    TEXT_PREFIX,
    KimiTinySpec,
    build_kimi_tiny,
    text_config,
)
from speculators_kimi.tiny_verifier import TinyVerifierSpec, build_tokenizer

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "BUILDERS",
    "Member",
    "deepseek_v3_mtp",
    "dense_text",
    "falcon",
    "gpt_neox",
    "kimi_k25_remote",
    "kimi_k25_sharded",
    "llama4",
    "qwen2_5_omni",
    "qwen2_5_vl",
    "write_checkpoint",
]

HIDDEN = 64
LAYERS = 8
HEADS = 4
KV_HEADS = 2


@dataclass
class Member:
    """A written verifier and the tensors / final norm its text model uses."""

    path: Path
    embed: torch.Tensor
    head: torch.Tensor
    norm: torch.nn.Module
    train_args: list[str] = field(default_factory=list)
    # Written if (and only if) code shipped in the checkpoint was imported.
    marker: Path | None = None
    # The instantiated verifier (text path) with its output head, for logits.
    model: torch.nn.Module | None = None


def _spec() -> TinyVerifierSpec:
    return TinyVerifierSpec()


def dense_text(tok: Any, **overrides: Any) -> dict[str, Any]:
    """Keyword arguments of a tiny dense text config (hidden 64, 8 layers, GQA 4/2)."""
    values: dict[str, Any] = {
        "vocab_size": _spec().vocab_size,
        "hidden_size": HIDDEN,
        "intermediate_size": 128,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "max_position_embeddings": 1024,
        "tie_word_embeddings": False,
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.convert_tokens_to_ids("<|end|>"),
        "pad_token_id": tok.pad_token_id,
    }
    values.update(overrides)
    return values


def _perturb_norms(model: torch.nn.Module, seed: int) -> None:
    """Final norms away from ones/zeros, so a wrong convention shows."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            leaf = name.rsplit(".", 2)
            if len(leaf) < 2 or not any(n in leaf[-2] for n in ("norm", "ln_f")):
                continue
            noise = torch.randn(param.shape, generator=gen) * 0.3
            param.copy_((1.0 if leaf[-1] == "weight" else 0.0) + noise)


def _member(path: Path, model: Any, norm: torch.nn.Module, **kw: Any) -> Member:
    embed = model.get_input_embeddings().weight.detach().clone()
    head = model.get_output_embeddings().weight.detach().clone()
    return Member(path, embed, head, norm, model=model, **kw)


def _finish(path: Path, tok: Any) -> None:
    tok.save_pretrained(path)


def write_checkpoint(
    path: Path, tensors: dict[str, torch.Tensor], shards: list[list[str]] | None
) -> None:
    """One ``model.safetensors``, or shards + ``model.safetensors.index.json``.

    Keys not listed in ``shards`` go to the last shard.
    """
    path.mkdir(parents=True, exist_ok=True)
    for old in path.glob("model*.safetensors*"):
        old.unlink()
    tensors = {k: v.detach().contiguous().clone() for k, v in tensors.items()}
    meta = {"format": "pt"}
    if shards is None:
        save_file(tensors, str(path / "model.safetensors"), metadata=meta)
        return
    groups = [list(g) for g in shards]
    listed = {k for g in groups for k in g}
    groups[-1].extend(k for k in tensors if k not in listed)
    weight_map: dict[str, str] = {}
    for i, group in enumerate(groups):
        name = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        save_file({k: tensors[k] for k in group}, str(path / name), metadata=meta)
        weight_map.update(dict.fromkeys(group, name))
    index = {"metadata": {}, "weight_map": weight_map}
    (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


# --------------------------------------------------------------------- members


def deepseek_v3_mtp(out: Path, *, per_expert: bool = False) -> Member:
    """DeepSeek-V3 (MLA + MoE) with an MTP layer ``model.layers.<N>.*`` on disk.

    ``per_expert``: keep the Hub's per-expert layout that ``save_pretrained``
    writes (``mlp.experts.<e>.gate_proj.weight`` ..., what DeepSeek-V3 and
    Kimi-K2.5 ship); default: transformers' fused-expert layout.
    """
    from transformers import DeepseekV3ForCausalLM

    tok = build_tokenizer(_spec())
    spec = KimiTinySpec(hidden_size=HIDDEN, num_words=_spec().num_words)
    cfg = text_config(
        spec, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id
    )
    torch.manual_seed(11)
    model = DeepseekV3ForCausalLM(cfg).eval()
    _perturb_norms(model, 11)
    model.save_pretrained(out)
    tensors = load_file(out / "model.safetensors")
    if not per_expert:
        # transformers' own (fused-expert) layout; save_pretrained writes the
        # Hub's per-expert ``mlp.experts.<e>.*`` keys.
        tensors = {k: v.clone() for k, v in model.state_dict().items()}
    # The MTP module: a full decoder layer plus its own embed/head/norms, all
    # shaped like the verifier's (what a suffix or shape match could pick).
    last, mtp = f"model.layers.{LAYERS - 1}.", f"model.layers.{LAYERS}."
    gen = torch.Generator().manual_seed(12)
    for key in [k for k in tensors if k.startswith(last)]:
        tensors[mtp + key[len(last) :]] = torch.randn(tensors[key].shape, generator=gen)
    vocab = cfg.vocab_size
    for name, shape in {
        "embed_tokens.weight": (vocab, HIDDEN),
        "shared_head.head.weight": (vocab, HIDDEN),
        "shared_head.norm.weight": (HIDDEN,),
        "enorm.weight": (HIDDEN,),
        "hnorm.weight": (HIDDEN,),
        "eh_proj.weight": (HIDDEN, 2 * HIDDEN),
    }.items():
        tensors[mtp + name] = torch.randn(shape, generator=gen)
    write_checkpoint(out, tensors, None)
    config = json.loads((out / "config.json").read_text())
    config["num_nextn_predict_layers"] = 1
    (out / "config.json").write_text(json.dumps(config, indent=2))
    _finish(out, tok)
    return _member(out, model, model.model.norm)


def gpt_neox(out: Path) -> Member:
    """GPT-NeoX: ``gpt_neox.embed_in``, ``embed_out``, ``final_layer_norm``."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    tok = build_tokenizer(_spec())
    d = dense_text(tok)
    d.pop("num_key_value_heads")
    torch.manual_seed(13)
    model = GPTNeoXForCausalLM(GPTNeoXConfig(**d)).eval()
    _perturb_norms(model, 13)
    model.save_pretrained(out)
    _finish(out, tok)
    return _member(out, model, model.gpt_neox.final_layer_norm)


def falcon(out: Path) -> Member:
    """Falcon-7B style: ``transformer.word_embeddings``/``h``/``ln_f``, tied head."""
    from transformers import FalconConfig, FalconForCausalLM

    tok = build_tokenizer(_spec())
    d = dense_text(tok, tie_word_embeddings=True)
    for key in ("intermediate_size", "num_key_value_heads"):
        d.pop(key)
    torch.manual_seed(14)
    model = FalconForCausalLM(FalconConfig(**d)).eval()
    _perturb_norms(model, 14)
    model.save_pretrained(out)
    _finish(out, tok)
    assert "lm_head.weight" not in load_file(out / "model.safetensors")
    return _member(out, model, model.transformer.ln_f)


def qwen2_5_vl(out: Path) -> Member:
    """Qwen2.5-VL as on the Hub: ``model.*`` text, ``visual.*`` tower, ``lm_head``."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    tok = build_tokenizer(_spec())
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}
    vision = {
        "depth": 1,
        "hidden_size": 32,
        "num_heads": 2,
        "intermediate_size": 64,
        "out_hidden_size": HIDDEN,
    }
    text = dense_text(tok, rope_parameters=rope)
    cfg = Qwen2_5_VLConfig(
        text_config=text,
        vision_config=vision,
        tie_word_embeddings=False,
        image_token_id=_spec().vocab_size - 1,
        video_token_id=_spec().vocab_size - 1,
    )
    torch.manual_seed(15)
    model = Qwen2_5_VLForConditionalGeneration(cfg).eval()
    _perturb_norms(model, 15)
    model.save_pretrained(out)
    _finish(out, tok)
    keys = load_file(out / "model.safetensors")
    assert "model.embed_tokens.weight" in keys and "visual.merger.ln_q.weight" in keys
    return _member(out, model, model.model.language_model.norm)


def llama4(out: Path) -> Member:
    """Llama-4 (``Llama4ForConditionalGeneration``): ``language_model.model.*``."""
    from transformers import Llama4Config, Llama4ForConditionalGeneration

    tok = build_tokenizer(_spec())
    text = dense_text(
        tok, head_dim=HIDDEN // HEADS, intermediate_size_mlp=128, num_local_experts=2
    )
    vision = {
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "intermediate_size": 64,
        "num_attention_heads": 2,
        "vision_output_dim": HIDDEN,
        "projector_input_dim": HIDDEN,
        "projector_output_dim": HIDDEN,
    }
    cfg = Llama4Config(
        text_config=text,
        vision_config=vision,
        image_token_index=_spec().vocab_size - 1,
        tie_word_embeddings=False,
    )
    torch.manual_seed(16)
    model = Llama4ForConditionalGeneration(cfg).eval()
    _perturb_norms(model, 16)
    model.save_pretrained(out)
    _finish(out, tok)
    keys = load_file(out / "model.safetensors")
    assert "language_model.model.embed_tokens.weight" in keys
    return _member(out, model, model.language_model.model.norm)


def qwen2_5_omni(out: Path) -> Member:
    """Qwen2.5-Omni: ``thinker.*`` (the text path) next to a ``talker.*`` decoder.

    The talker has its own ``model.embed_tokens``/``layers``/``norm`` with the
    thinker's hidden size and layer count; it must never be picked.
    """
    from transformers import (
        Qwen2_5OmniConfig,
        Qwen2_5OmniTalkerConfig,
        Qwen2_5OmniTalkerForConditionalGeneration,
        Qwen2_5OmniThinkerConfig,
        Qwen2_5OmniThinkerForConditionalGeneration,
    )

    tok = build_tokenizer(_spec())
    vocab = _spec().vocab_size
    # Head dim 16: the default M-RoPE sections [16, 24, 24] need head dim 128.
    rope = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]}
    thinker_cfg = Qwen2_5OmniThinkerConfig(
        text_config=dense_text(tok, rope_parameters=rope),
        audio_config={
            "d_model": 32,
            "encoder_layers": 1,
            "encoder_attention_heads": 2,
            "encoder_ffn_dim": 64,
            "output_dim": HIDDEN,
            "num_mel_bins": 16,
            "max_source_positions": 64,
            "n_window": 8,
        },
        vision_config={
            "depth": 1,
            "hidden_size": 32,
            "num_heads": 2,
            "intermediate_size": 64,
            "out_hidden_size": HIDDEN,
        },
        audio_token_index=vocab - 1,
        image_token_index=vocab - 1,
        video_token_index=vocab - 1,
    )
    talker_cfg = Qwen2_5OmniTalkerConfig(
        vocab_size=300,
        embedding_size=HIDDEN,
        hidden_size=HIDDEN,
        intermediate_size=128,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HIDDEN // HEADS,
        max_position_embeddings=1024,
    )
    torch.manual_seed(17)
    thinker = Qwen2_5OmniThinkerForConditionalGeneration(thinker_cfg).eval()
    _perturb_norms(thinker, 17)
    talker = Qwen2_5OmniTalkerForConditionalGeneration(talker_cfg).eval()
    _perturb_norms(talker, 18)
    tensors = {f"thinker.{k}": v for k, v in thinker.state_dict().items()}
    tensors.update({f"talker.{k}": v for k, v in talker.state_dict().items()})
    assert "talker.model.norm.weight" in tensors
    write_checkpoint(out, tensors, None)
    Qwen2_5OmniConfig(
        thinker_config=thinker_cfg.to_dict(), talker_config=talker_cfg.to_dict()
    ).save_pretrained(out)
    _finish(out, tok)
    return _member(out, thinker, thinker.model.norm)


_REMOTE_CODE = """\
from pathlib import Path

Path({marker!r}).write_text("imported {name}")
"""


def _kimi(out: Path, *, seed: int) -> tuple[Member, dict[str, torch.Tensor]]:
    """Kimi-K2.5 (``build_kimi_tiny``'s layout) with a text model we hold."""
    from transformers import DeepseekV3ForCausalLM

    spec = KimiTinySpec(seed=seed)
    build_kimi_tiny(out, spec)
    on_disk = load_file(out / "model.safetensors")
    text = json.loads((out / "config.json").read_text())["text_config"]
    cfg = text_config(
        spec,
        bos_token_id=text["bos_token_id"],
        eos_token_id=text["eos_token_id"],
        pad_token_id=text["pad_token_id"],
    )
    torch.manual_seed(seed + 1)
    model = DeepseekV3ForCausalLM(cfg).eval()
    _perturb_norms(model, seed + 1)
    tensors = {k: v for k, v in on_disk.items() if not k.startswith(TEXT_PREFIX)}
    tensors.update({TEXT_PREFIX + k: v for k, v in model.state_dict().items()})
    return _member(out, model, model.model.norm), tensors


def kimi_k25_remote(out: Path) -> Member:
    """Kimi-K2.5 as the Hub ships it: ``auto_map`` to code in the checkpoint.

    The code files write a marker when imported; training runs without
    ``--trust-remote-code`` and must not import them.
    """
    member, tensors = _kimi(out, seed=21)
    write_checkpoint(out, tensors, None)
    marker = out.parent / f"{out.name}.imported"
    for name in ("configuration_kimi_k25", "modeling_kimi_k25"):
        (out / f"{name}.py").write_text(
            _REMOTE_CODE.format(marker=str(marker), name=name)
        )
    config = json.loads((out / "config.json").read_text())
    config["auto_map"] = {
        "AutoConfig": "configuration_kimi_k25.KimiK25Config",
        "AutoModel": "modeling_kimi_k25.KimiK25ForConditionalGeneration",
        "AutoModelForCausalLM": "modeling_kimi_k25.KimiK25ForConditionalGeneration",
    }
    assert config["text_config"]["model_type"] == "kimi_k2"
    (out / "config.json").write_text(json.dumps(config, indent=2))
    member.marker = marker
    return member


def kimi_k25_sharded(out: Path) -> Member:
    """Kimi-K2.5 in 4 shards: embedding first, head and final norm last."""
    member, tensors = _kimi(out, seed=31)
    pre = TEXT_PREFIX + "model."
    first = [pre + "embed_tokens.weight"]
    last = [TEXT_PREFIX + "lm_head.weight", pre + "norm.weight"]
    middle = [
        k for k in tensors if k.startswith((pre + "layers.0.", pre + "layers.1."))
    ]
    rest = [k for k in tensors if k not in {*first, *middle, *last}]
    write_checkpoint(out, tensors, [first, middle, rest, last])
    assert not (out / "model.safetensors").exists()
    return member


BUILDERS: dict[str, Callable[[Path], Member]] = {
    "deepseek-v3-mtp": deepseek_v3_mtp,
    "deepseek-v3-per-expert": lambda out: deepseek_v3_mtp(out, per_expert=True),
    "gpt-neox": gpt_neox,
    "falcon": falcon,
    "qwen2.5-vl": qwen2_5_vl,
    "llama4": llama4,
    "qwen2.5-omni": qwen2_5_omni,
    "kimi-k25-remote": kimi_k25_remote,
    "kimi-k25-sharded": kimi_k25_sharded,
}
