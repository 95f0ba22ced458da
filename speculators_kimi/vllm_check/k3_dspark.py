"""The check of an MLA DSpark export (native ``k3_dspark`` layout), the way
``vllm serve VERIFIER --speculative-config '{"method": "dspark", "model":
EXPORT}'`` takes it: vLLM's ``ModelConfig`` for the target, its
``SpeculativeConfig`` (``K3DSparkConfig`` parses and checks the export), the
class ``ModelRegistry`` resolves (``K3DSparkForCausalLM``) built under that
``VllmConfig``, every parameter NaN-filled, the export loaded through its own
``load_weights`` (which also fills the cross-layer ``context_kv_proj``) and
``process_weights_after_loading``; the target's embedding and LM head are then
given to it as vLLM's DSpark loader gives them (``embed_tokens``, ``lm_head``).

One block step, as vLLM's DSpark speculator drives it: the aux states of ``n``
context tokens through ``combine_hidden_states`` and
``precompute_and_store_context_kv`` (positions ``0..n-1``, slots ``0..n-1`` of
each layer's latent KV cache, ``kv_lora_rank + qk_rope_head_dim`` per slot),
the block ``[anchor, mask, ...]`` at positions ``n..n+B-1`` through
``forward``, then ``compute_draft_logits + markov_bias(markov_embed(prev))`` and
``compute_confidence``; ours is upstream's training forward at the same anchor
(:func:`.block_layout._ours_block`). What is stubbed: :data:`.stubs.K3_STUBS`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..evaluate.session import cast_draft
from .block_layout import (
    BlockRows,
    _compare,
    _ours_block,
    block_step_inputs,
    load_block_ours,
    shared_head,
)
from .draft import (
    aux_source,
    build_native_draft,
    cpu_vllm_config,
    nan_fill,
    native_speculative_config,
    not_loaded,
    recorded_tensors,
    vllm_version,
)
from .native_mla import _text_target
from .request import CheckRequest
from .stubs import K3_STUBS, bind_k3_kv_caches, stub_k3_dspark

__all__ = ["check_k3_dspark"]

_PARSED = (
    "architectures",
    "model_type",
    "vocab_size",
    "draft_vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "rope_parameters",
    "target_layer_ids",
    "num_target_layers",
    "target_hidden_size",
    "mask_token_id",
    "block_size",
    "markov_rank",
    "enable_confidence_head",
    "confidence_head_with_markov",
)


def _configs(request: CheckRequest, target_dir: str):  # type: ignore[no-untyped-def]
    import torch
    from vllm.config import ModelConfig

    target = ModelConfig(model=target_dir, dtype="float32")
    # Unset, vLLM serves the block size; set, the flag's count.
    spec = native_speculative_config(
        target, request.export, "dspark", request.num_speculative_tokens
    )
    config = cpu_vllm_config(target, spec)
    torch.set_default_dtype(torch.float32)
    return target, spec, config


def _load(draft, config, request: CheckRequest, head) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """NaN-fill, vLLM's ``load_weights`` and post-processing, then the target's
    head given to the draft (vLLM's DSpark loader aliases the target's
    ``lm_head``: the draft has none of its own). The block is embedded by the
    caller (``inputs_embeds``), so no embedding table is built."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    nan_fill(draft)
    names: list[str] = []
    with set_current_vllm_config(config):
        loaded = draft.load_weights(recorded_tensors(request.export, names))
        draft.process_weights_after_loading()
        with torch.device("meta"):  # its weight is the target's, set below
            lm_head = ParallelLMHead(*head.shape)
    lm_head.weight = head
    draft.lm_head = lm_head
    unloaded = not_loaded(draft)
    return {
        "tensors": sorted(names),
        "loaded_parameters": len(loaded),
        "shared_from_verifier": ["lm_head.weight"],
        "embedded_by": "the verifier embedding's rows of the block's tokens, as "
        "forward's inputs_embeds",
        "parameters_not_loaded": unloaded,
    }


def _vllm_block(draft, config, ctx_aux, block_ids, prev_ids, rows):  # type: ignore[no-untyped-def]
    import torch
    from vllm.config import set_current_vllm_config

    n, b = ctx_aux.shape[0], block_ids.shape[0]
    bind_k3_kv_caches(draft, n + b)
    for layer in draft.model.layers:
        layer.self_attn.block_slots = torch.arange(n, n + b)
    with torch.no_grad(), set_current_vllm_config(config):
        states = draft.combine_hidden_states(ctx_aux)
        draft.precompute_and_store_context_kv(states, torch.arange(n), torch.arange(n))
        positions = torch.arange(n, n + b)
        hidden = draft(block_ids, positions, inputs_embeds=rows(block_ids))
        emb = draft.markov_embed(prev_ids)
        logits = draft.compute_draft_logits(hidden) + draft.markov_bias(emb)
        confidence = None
        if draft.model.confidence_head is not None:
            confidence = draft.compute_confidence(hidden, emb)
    pages = [tuple(layer.self_attn.kv_cache.shape) for layer in draft.model.layers]
    return hidden, logits.float(), confidence, pages


def check_k3_dspark(request: CheckRequest, exported: dict[str, Any]) -> dict:
    """The MLA DSpark export as vLLM parses, builds and loads it; one block step
    against the training forward of the checkpoint."""
    import gc
    import shutil
    import tempfile

    import torch
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import (
        get_eagle3_aux_layers_from_config,
    )

    report: dict[str, Any] = {"vllm": vllm_version(), "layout": "native"}
    scratch = Path(tempfile.mkdtemp(prefix="vllm-check-"))
    try:
        target_dir, stand_in = _text_target(request.verifier, scratch / "target")
        report["target_config"] = stand_in or request.verifier
        target, spec, config = _configs(request, target_dir)
        hf = spec.draft_model_config.hf_config
        report["parsed"] = {
            "hf_config_class": type(hf).__name__,
            **{key: getattr(hf, key, None) for key in _PARSED},
        }
        report["serve"] = {
            "method": spec.method,
            "num_speculative_tokens": spec.num_speculative_tokens,
            "block_size": getattr(hf, "block_size", None),
            "use_mla": bool(spec.draft_model_config.use_mla),
        }
        ours = load_block_ours(request)
        # The verifier layers vLLM captures for the draft (target_layer_ids + 1),
        # against the aux layers the draft was trained on.
        aux = list(get_eagle3_aux_layers_from_config(spec) or [])
        report["aux_layers"] = {"vllm": aux, "trained": list(ours.target_layer_ids)}
        source = aux_source(request, ours.target_layer_ids)
        report["aux_states"] = type(source).__name__
        stub_k3_dspark()
        report["stubbed"] = K3_STUBS
        draft, built = build_native_draft(config, spec)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report.update(built)
    head = shared_head(ours)
    gc.collect()
    report.update(_load(draft, config, request, head))

    b = int(ours.block_size)
    n = request.tokens
    aux, block_ids, prev_ids = block_step_inputs(ours, source, n)
    rows = BlockRows(ours, block_ids)
    gc.collect()
    _, theirs, their_conf, pages = _vllm_block(
        draft, config, aux, block_ids, prev_ids, rows
    )
    report["kv_cache_pages"] = pages
    del draft, config
    gc.collect()

    _, mine, my_conf = _ours_block(
        cast_draft(ours, torch.float32), aux, block_ids, prev_ids
    )
    step: dict[str, Any] = {"context_tokens": n, "tokens": b}
    step.update(
        _compare(theirs, mine, torch.arange(ours.draft_vocab_size), source.vocab_size)
    )
    if their_conf is not None and my_conf is not None:
        step["max_abs_confidence_diff"] = float((their_conf - my_conf).abs().max())
    report["one_step"] = step
    report["exported_model_type"] = exported.get("model_type")
    return report
