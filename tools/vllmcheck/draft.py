"""vLLM's draft class built, an export loaded through its own ``load_weights``,
and one draft step compared with ours."""

from __future__ import annotations

from .stubs import init_single_process

__all__ = [
    "SyntheticAux",
    "VerifierAux",
    "aux_source",
    "build_draft",
    "export_tensors",
    "load_and_check",
    "load_ours",
    "one_step",
]


def load_ours(args):  # type: ignore[no-untyped-def]
    """Our draft in float32 (what the step is compared in), without the frozen
    verifier head only training's loss reads (0.9 GB at Kimi-K2.5 size)."""
    import gc

    import torch

    from speculators_kimi.evaluate import load_draft

    ours = load_draft(args.checkpoint, torch.float32, args.verifier)
    del ours.verifier_lm_head
    gc.collect()
    return ours


class VerifierAux:
    """A prompt's aux hidden states from the verifier's decoder (as evaluate
    computes them): what vLLM's target would hand the draft."""

    def __init__(self, verifier: str, layer_ids: list[int]) -> None:
        from speculators_kimi.verifier.causal import load_causal_verifier

        self.verifier = load_causal_verifier(verifier, layer_ids)
        self.vocab_size = int(self.verifier.text_config.vocab_size)
        self.num_hidden_layers = int(self.verifier.text_config.num_hidden_layers)

    def states(self, prompt: list[int]):  # type: ignore[no-untyped-def]
        from transformers import DynamicCache

        return self.verifier.forward(prompt, DynamicCache())[1]


class SyntheticAux:
    """Aux hidden states drawn at the verifier's width, no decoder built (a real
    Kimi-K2.5 decoder does not fit a CPU box): the check feeds both drafts the
    same inputs, so it still proves loading and the draft's own computation, not
    the verifier's capture."""

    def __init__(self, verifier: str, layer_ids: list[int]) -> None:
        from speculators.utils.text_config import load_config_dict, text_config_dict

        text = text_config_dict(load_config_dict(verifier))
        self.vocab_size = int(text["vocab_size"])
        self.num_hidden_layers = int(text["num_hidden_layers"])
        self.width = len(layer_ids) * int(text["hidden_size"])

    def states(self, prompt: list[int]):  # type: ignore[no-untyped-def]
        import torch

        gen = torch.Generator().manual_seed(1)
        return torch.randn(len(prompt), self.width, generator=gen)


def aux_source(args, layer_ids: list[int]):  # type: ignore[no-untyped-def]
    """The aux states the check feeds both drafts (``--synthetic-aux-states``)."""
    cls = SyntheticAux if args.synthetic_aux_states else VerifierAux
    return cls(args.verifier, list(layer_ids))


def export_tensors(export: str):  # type: ignore[no-untyped-def]
    """The export's tensors, one at a time (nothing held beyond the one loaded)."""
    from pathlib import Path

    from safetensors import safe_open

    with safe_open(str(Path(export) / "model.safetensors"), framework="pt") as f:
        for name in f.keys():  # noqa: SIM118 - safe_open has no iterator
            yield name, f.get_tensor(name)


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


def load_and_check(draft, config, export: str, ours) -> dict:  # type: ignore[no-untyped-def]
    """NaN-fill ``draft``, load the export's tensors (streamed) with its
    ``load_weights``, share the verifier's embedding when the export has none;
    what no tensor reached."""
    import torch
    from vllm.config import set_current_vllm_config

    with torch.no_grad():
        for p in draft.parameters():
            p.fill_(float("nan")) if p.is_floating_point() else p.fill_(-1)
    names: list[str] = []

    def stream():  # type: ignore[no-untyped-def]
        for name, tensor in export_tensors(export):
            names.append(name)
            yield name, tensor

    with set_current_vllm_config(config):
        draft.load_weights(stream())
    shared = []
    if "embed_tokens.weight" not in names:  # vLLM's proposer shares the target's
        # The same storage, as vLLM's proposer shares it (no second copy).
        mine, theirs = ours.embed_tokens.weight, draft.model.embed_tokens.weight
        if theirs.shape == mine.shape and theirs.dtype == mine.dtype:
            theirs.data = mine.data
        else:
            with torch.no_grad():
                theirs.copy_(mine)
        shared.append("model.embed_tokens.weight")
    unloaded = [
        name
        for name, p in draft.named_parameters()
        if (p.isnan().any() if p.is_floating_point() else (p < 0).all())
    ]
    return {
        "tensors": sorted(names),
        "shared_from_verifier": shared,
        "parameters_not_loaded": unloaded,
    }


def one_step(draft, config, ours, source, tokens: int) -> dict:  # type: ignore[no-untyped-def]
    """One draft step over a prompt: vLLM's draft against our DraftRunner, both
    fed the aux states of ``source`` (:func:`aux_source`)."""
    import torch
    from vllm.config import set_current_vllm_config

    from speculators_kimi.evaluate import DraftRunner

    gen = torch.Generator().manual_seed(0)
    vocab = source.vocab_size
    prompt = torch.randint(0, vocab, (tokens,), generator=gen).tolist()
    aux = source.states(prompt)
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
    diff = float((theirs[finite] - mine[finite]).abs().max())
    scale = float(mine[finite].abs().max())
    return {
        "tokens": len(prompt) - 1,
        "max_abs_logit_diff": diff,
        "max_abs_logit": scale,
        "max_rel_logit_diff": diff / scale if scale else diff,
        "same_masked_tokens": bool(torch.equal(finite, torch.isfinite(theirs))),
        "same_argmax": bool(torch.equal(theirs.argmax(-1), mine.argmax(-1))),
    }
