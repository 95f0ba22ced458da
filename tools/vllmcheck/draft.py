"""vLLM's draft class built, an export loaded through its own ``load_weights``,
and one draft step compared with ours."""

from __future__ import annotations

from .stubs import init_single_process

__all__ = ["build_draft", "load_and_check", "one_step"]


def build_draft(hf_config, target_layers: int, target_vocab: int):  # type: ignore[no-untyped-def]
    import types

    import torch
    from vllm.config import (
        CompilationMode,
        DeviceConfig,
        VllmConfig,
        set_current_vllm_config,
    )
    from vllm.model_executor.models.registry import ModelRegistry

    config = VllmConfig(device_config=DeviceConfig(device="cpu"))
    config.compilation_config.mode = CompilationMode.NONE
    # The two configs the draft reads: its own, and the target's size.
    config.speculative_config = types.SimpleNamespace(  # type: ignore[assignment]
        draft_model_config=types.SimpleNamespace(
            hf_config=hf_config, quantization=None
        ),
        parallel_drafting=False,
    )
    config.model_config = types.SimpleNamespace(  # type: ignore[assignment]
        get_total_num_hidden_layers=lambda: target_layers,
        get_vocab_size=lambda: target_vocab,
        dtype=torch.float32,
        head_dtype=torch.float32,
        is_moe=False,
    )
    with set_current_vllm_config(config):
        init_single_process()
        arch = hf_config.architectures[0]
        # The registry's own resolution, for the architecture the parser wrote.
        picker = types.SimpleNamespace(model_impl="vllm", convert_type="none")
        cls, _ = ModelRegistry.resolve_model_cls([arch], model_config=picker)
        return cls(vllm_config=config), arch, config


def load_and_check(draft, config, tensors: dict, ours) -> dict:  # type: ignore[no-untyped-def]
    """NaN-fill ``draft``, load ``tensors`` with its ``load_weights``, share the
    verifier's embedding when the export has none; what no tensor reached."""
    import torch
    from vllm.config import set_current_vllm_config

    with torch.no_grad():
        for p in draft.parameters():
            p.fill_(float("nan")) if p.is_floating_point() else p.fill_(-1)
    with set_current_vllm_config(config):
        draft.load_weights(iter(tensors.items()))
    shared = []
    if "embed_tokens.weight" not in tensors:  # vLLM's proposer shares the target's
        with torch.no_grad():
            draft.model.embed_tokens.weight.copy_(ours.embed_tokens.weight)
        shared.append("model.embed_tokens.weight")
    unloaded = [
        name
        for name, p in draft.named_parameters()
        if (p.isnan().any() if p.is_floating_point() else (p < 0).all())
    ]
    return {
        "tensors": sorted(tensors),
        "shared_from_verifier": shared,
        "parameters_not_loaded": unloaded,
    }


def one_step(draft, config, ours, verifier, tokens: int) -> dict:  # type: ignore[no-untyped-def]
    """One draft step over a prompt: vLLM's draft against our DraftRunner."""
    import torch
    from transformers import DynamicCache
    from vllm.config import set_current_vllm_config

    from speculators_kimi.evaluate import DraftRunner

    gen = torch.Generator().manual_seed(0)
    vocab = int(verifier.text_config.vocab_size)
    prompt = torch.randint(0, vocab, (tokens,), generator=gen).tolist()
    _, aux = verifier.forward(prompt, DynamicCache())
    ids = torch.tensor(prompt[1:])
    with torch.no_grad(), set_current_vllm_config(config):
        states = draft.combine_hidden_states(aux[:-1])
        # vLLM runs the pair (x[j+1], g[j]) at the target's position j.
        hidden, _ = draft(ids, torch.arange(len(prompt) - 1), states)
        theirs = draft.compute_logits(hidden).float()
    runner = DraftRunner(ours, "cpu")
    _, logits = runner.step(ids, runner.project(aux[:-1]), 1)
    mine = logits.new_full((logits.shape[0], vocab), float("-inf"))
    mine[:, runner.draft_to_target] = logits
    finite = torch.isfinite(mine)
    return {
        "tokens": len(prompt) - 1,
        "max_abs_logit_diff": float((theirs[finite] - mine[finite]).abs().max()),
        "same_masked_tokens": bool(torch.equal(finite, torch.isfinite(theirs))),
        "same_argmax": bool(torch.equal(theirs.argmax(-1), mine.argmax(-1))),
    }
