#!/usr/bin/env python3
"""Does training rebuild every verifier's own logits? A sweep over transformers.

For each causal LM of the installed transformers (``MODEL_FOR_CAUSAL_LM_MAPPING``,
or the model types named), build a tiny random checkpoint, build an EAGLE-3 draft
and a DFlash draft of it as ``speculators train`` does, and compare each draft's
targets (the verifier head and final norm it loaded, then the logit transform) with
the model's own ``ForCausalLM`` logits, from the same last hidden states; and check
that the final state our ``generate-hidden-states`` writes is that state. Each model
type ends as:

- ``ok``: the targets are the model's logits (to 1e-3 of their largest);
- ``MISMATCH``: the draft would train toward other logits, silently (or from
  another final state);
- ``refused``: training stops before any work, with its message (a ``ValueError``);
- ``CRASH``: training stops with another exception, a traceback for the user;
- ``skipped``: the sweep could not build a tiny model of it (its config needs
  values the sweep does not set): the case is untested, not passed.

Run it after a transformers upgrade (units 0041 to 0045 came from it)::

    .venv/bin/python tools/verifier_sweep.py [MODEL_TYPE ...]

It exits 1 when any model type is a ``MISMATCH`` or a ``CRASH``. About a minute on
2 cores.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Sizes set on every config that has the attribute: small enough for a CPU.
TINY: dict[str, Any] = {
    "hidden_size": 64,
    "d_model": 64,
    "n_embd": 64,
    "num_hidden_layers": 3,
    "num_layers": 3,
    "decoder_layers": 3,
    "encoder_layers": 3,
    "n_layer": 3,
    "n_layers": 3,
    "num_attention_heads": 4,
    "n_head": 4,
    "n_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 512,
    "intermediate_size": 128,
    "ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "encoder_ffn_dim": 128,
    "n_inner": 128,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "max_position_embeddings": 256,
    "kv_lora_rank": 16,
    "q_lora_rank": 32,
    "qk_nope_head_dim": 8,
    "qk_rope_head_dim": 8,
    "v_head_dim": 16,
    "rotary_dim": 8,
    "first_k_dense_replace": 1,
    "n_group": 1,
    "topk_group": 1,
    "index_n_heads": 4,
    "index_head_dim": 16,
    "index_topk": 16,
    "vocab_size_per_layer_input": 512,
    "hidden_size_per_layer_input": 16,
    "num_kv_shared_layers": 0,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
}
#: Models above this many parameters (counted on the meta device) are skipped.
MAX_PARAMETERS = 40_000_000
SEQUENCE = 7
TOLERANCE = 1e-3


@dataclass
class Outcome:
    status: str  # ok, MISMATCH, refused, CRASH, skipped
    detail: str = ""


#: Fields a config's defaults leave unset though its model needs them, set as
#: the released checkpoints set them (at the tiny layer count): LFM2-MoE's
#: ``layer_types`` (LiquidAI/LFM2-8B-A1B mixes short-conv and attention layers)
#: and its leading dense layers; Cohere Compass's rotary parameters, one entry
#: per layer type (its default is none), its multimodal sections cut to the
#: tiny head (8 rotary pairs).
UNSET_DEFAULTS: dict[str, dict[str, Any]] = {
    "lfm2_moe": {
        "layer_types": ["conv", "full_attention", "conv"],
        "num_dense_layers": 1,
    },
    "cohere_compass_text": {
        "rope_parameters": {
            "full_attention": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [3, 3, 2],
            }
        },
    },
}


def tiny_config(model_type: str, config_class: type | None = None) -> Any:
    """``config_class``'s config (by default the model type's) built with the
    :data:`TINY` sizes it takes, so that its own ``__post_init__`` derives the rest
    (head widths, per-layer lists). A multimodal config gets them in its
    ``text_config``; MLA keeps its rotary width as its ``head_dim``."""
    from transformers import AutoConfig

    probe = config_class() if config_class else AutoConfig.for_model(model_type)
    text = probe.get_text_config()
    mla = _get(text, "qk_rope_head_dim") is not None
    sizes = {
        name: value
        for name, value in TINY.items()
        if _has_field(text, name) and not isinstance(_get(text, name), list | dict)
    }
    if mla:  # MLA: the rotary width is its head_dim, every head has its own KV
        sizes.update(head_dim=TINY["qk_rope_head_dim"])
        sizes.update(num_key_value_heads=TINY["num_attention_heads"])
    layers = sizes.get("num_hidden_layers", TINY["num_hidden_layers"])
    default_layers = _get(text, "num_hidden_layers")
    for name in dir(text):  # per-layer lists follow the layer count
        current = _get(text, name)
        if (
            isinstance(current, list)
            and len(current) == default_layers
            and _has_field(text, name)
        ):  # the first layers and the last (often the one of its kind)
            sizes[name] = current[: layers - 1] + current[-1:]
    sizes.update(UNSET_DEFAULTS.get(model_type, {}))
    build = type(probe)
    if text is probe:
        return _built(build, sizes, lambda: build(**sizes))
    top = (
        {"tie_word_embeddings": False}
        if _has_field(probe, "tie_word_embeddings")
        else {}
    )
    return _built(build, sizes, lambda: build(text_config=sizes, **top))


def _built(build: type, sizes: dict[str, Any], construct: Any) -> Any:
    """``construct()``; where its validation refuses the sizes, the defaults with
    the sizes set afterwards (as far as the config lets them be set)."""
    try:
        return construct()
    except Exception:
        config = build()
        text = config.get_text_config()
        for name, value in sizes.items():
            _set(text, name, value)
        return config


def _has_field(config: Any, name: str) -> bool:
    """Whether ``name`` is one of ``config``'s own fields or their aliases (not a
    derived value)."""
    fields = getattr(type(config), "__dataclass_fields__", {})
    aliases = getattr(config, "attribute_map", {})
    return name in fields or name in vars(config) or name in aliases


def _get(config: Any, name: str) -> Any:
    try:
        return getattr(config, name, None)
    except Exception:  # transformers' ambiguous per-layer attribute
        return None


def _set(config: Any, name: str, value: Any) -> None:
    """Set ``name`` unless the config derives it (a property without setter)."""
    with contextlib.suppress(AttributeError):
        setattr(config, name, value)


def _last_layer(model: Any, layers: int) -> Any:
    """The last decoder layer: the first module list of ``layers`` modules."""
    import torch

    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == layers:
            return module[-1]
    return None


def _said(err: BaseException) -> str:
    """The first line of what ``err`` says, with its type."""
    return f"{type(err).__name__}: {err}".splitlines()[0][:160]


def _skipped(err: BaseException) -> Outcome:
    return Outcome("skipped", _said(err))


def sweep_one(model_type: str, class_name: str, root: Path) -> Outcome:
    """Build ``model_type``'s tiny checkpoint under ``root`` and compare."""
    import torch
    import transformers

    model_class = getattr(transformers, class_name, None)
    if model_class is None:
        return Outcome("skipped", f"transformers has no {class_name}")
    try:
        config = tiny_config(model_type, model_class.config_class)
        with torch.device("meta"):
            size = sum(p.numel() for p in model_class(config).parameters())
        if size > MAX_PARAMETERS:
            return Outcome("skipped", f"{size / 1e6:.0f}M parameters at these sizes")
        torch.manual_seed(0)
        model = model_class(config).eval()
    except Exception as err:  # the sweep's sizes do not fit this config
        return _skipped(err)
    with torch.no_grad():  # norms and head away from their initial values
        for param in model.parameters():
            if param.dim() == 1:
                param.add_(torch.randn_like(param) * 0.3)
        head = model.get_output_embeddings()
        if getattr(head, "weight", None) is not None:
            head.weight.normal_(0.0, 2.0)
    text = config.get_text_config()
    last = _last_layer(model, text.num_hidden_layers)
    if last is None:
        return Outcome("skipped", "no list of num_hidden_layers decoder layers")
    seen: list[Any] = []
    hook = last.register_forward_hook(
        lambda _m, _a, out: seen.append(out[0] if isinstance(out, tuple) else out)
    )
    ids = torch.randint(3, text.vocab_size, (1, SEQUENCE))
    path = root / model_type
    try:
        with torch.no_grad():
            logits = model(input_ids=ids, use_cache=False).logits.float()
        model.save_pretrained(path)
    except Exception as err:
        return _skipped(err)
    finally:
        hook.remove()
    try:
        targets = _draft_targets(path, seen[-1], logits.shape[-1])
    except ValueError as err:  # a refusal: the resolver's, the config's
        return Outcome("refused", _said(err))
    except Exception as err:  # what training would stop with, unexplained
        return Outcome("CRASH", _said(err))
    state, refusal = _captured_final_state(model, ids)
    if seen[-1].dim() != 3:  # several streams per layer (Gemma-3n's AltUp)
        return Outcome("refused", refusal or f"a layer outputs {list(seen[-1].shape)}")
    outcome = _compare(targets, logits)
    if state is None:
        detail = f"{outcome.detail}; generate-hidden-states refuses it"
        return Outcome(outcome.status, detail)
    if not torch.allclose(state, seen[-1]):
        return Outcome("MISMATCH", "generate-hidden-states writes another final state")
    return outcome


def _compare(targets: dict[str, Any], logits: Any) -> Outcome:
    """Each kind of draft's targets against the model's logits: the worst."""
    worst, worst_kind = 0.0, ""
    scale = logits.abs().max().clamp(min=1e-6)
    for kind, draft_targets in targets.items():
        if draft_targets.shape != logits.shape:
            shapes = f"{list(draft_targets.shape)} vs {list(logits.shape)}"
            return Outcome("MISMATCH", f"{kind}: shape {shapes}")
        error = float((draft_targets - logits).abs().max() / scale)
        if error > worst:
            worst, worst_kind = error, f" ({kind})"
    status = "ok" if worst < TOLERANCE else "MISMATCH"
    return Outcome(status, f"{worst:.1e} of the largest logit{worst_kind}")


def _captured_final_state(model: Any, ids: Any) -> tuple[Any, str]:
    """The final hidden state our ``generate-hidden-states`` writes for ``ids``,
    or None and why it refuses the model."""
    from speculators_kimi.verifier.capture import capture_hidden_states

    try:
        states, _ = capture_hidden_states(model, ids, [0])
    except (ValueError, TypeError) as err:  # its refusals
        return None, _said(err)
    return states[:, :, -1], ""


def _draft_targets(path: Path, last_hidden: Any, vocab: int) -> dict[str, Any]:
    """What each kind of draft's loss compares against, from ``last_hidden``: an
    EAGLE-3 draft's and a DFlash draft's (DSpark, DFlash2 and XPress build theirs
    as DFlash does)."""
    import torch

    drafts = {
        "EAGLE-3": _eagle3_draft(path, vocab),
        "DFlash": _dflash_draft(path, vocab),
    }
    with torch.no_grad():
        return {
            kind: draft.verifier_logit_transform(
                draft.verifier_lm_head(draft.verifier_norm(last_hidden.float()))
            )
            for kind, draft in drafts.items()
        }


def _layer_config(path: Path, draft_arch: str) -> Any:
    from speculators.train.cli import create_transformer_layer_config

    return create_transformer_layer_config(
        verifier_name_or_path=str(path),
        num_layers=1,
        draft_arch=draft_arch,
        hidden_act="silu",
        sliding_window=32,
        full_attention_indices=[0],
    )


def _eagle3_draft(path: Path, vocab: int) -> Any:
    """An EAGLE-3 draft of the checkpoint at ``path``, as training builds it."""
    from speculators.models.eagle3.core import Eagle3DraftModel

    return Eagle3DraftModel.from_training_args(
        verifier_config=_layer_config(path, "llama"),
        t2d=None,
        d2t=None,
        verifier_name_or_path=str(path),
        draft_vocab_size=vocab,
        norm_before_residual=False,
        ttt_steps=1,
        draft_attn_impl="eager",
        target_layer_ids=[0, 1, 2],
    )


def _dflash_draft(path: Path, vocab: int) -> Any:
    """A DFlash draft (Qwen3 layers) of the checkpoint at ``path``."""
    from speculators.models.dflash.core import DFlashDraftModel

    return DFlashDraftModel.from_training_args(
        verifier_config=_layer_config(path, "qwen3"),
        verifier_name_or_path=str(path),
        draft_vocab_size=vocab,
        mask_token_id=vocab - 1,
        block_size=4,
        target_layer_ids=[0, 1, 2],
        draft_attn_impl="sdpa",
    )


def _timeout(_signum: int, _frame: Any) -> None:
    raise TimeoutError("over the time limit")


def main(argv: list[str] | None = None) -> int:
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES as CAUSAL,
    )

    from speculators_kimi.quiet import quiet_libraries

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_types", nargs="*", help="default: every causal LM")
    parser.add_argument("--seconds", type=int, default=60, help="per model type")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.model_types) - set(CAUSAL))
    if unknown:
        parser.error(f"not causal LM model types of this transformers: {unknown}")
    counts: dict[str, int] = {}
    previous = signal.signal(signal.SIGALRM, _timeout)
    with quiet_libraries(), tempfile.TemporaryDirectory() as scratch:
        for model_type in args.model_types or sorted(CAUSAL):
            signal.alarm(args.seconds)
            try:
                outcome = sweep_one(model_type, CAUSAL[model_type], Path(scratch))
            except TimeoutError as err:
                outcome = _skipped(err)
            finally:
                signal.alarm(0)
            counts[outcome.status] = counts.get(outcome.status, 0) + 1
            print(f"{model_type:28s} {outcome.status:9s} {outcome.detail}", flush=True)
    signal.signal(signal.SIGALRM, previous)
    print(", ".join(f"{n} {status}" for status, n in sorted(counts.items())))
    return 1 if counts.get("MISMATCH") or counts.get("CRASH") else 0


if __name__ == "__main__":
    sys.exit(main())
