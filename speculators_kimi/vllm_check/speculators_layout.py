"""The check of a speculators-format export (``Eagle3LlamaForCausalLM``)."""

from __future__ import annotations

from .draft import (
    PromptRows,
    aux_source,
    build_draft,
    check_draft,
    load_ours,
    serve_report,
    vllm_version,
)
from .request import CheckRequest
from .stubs import stub_attention

__all__ = ["check_speculators_layout"]


def check_speculators_layout(request: CheckRequest) -> dict:
    import torch
    from vllm.transformers_utils.configs.speculators.base import SpeculatorsConfig

    report: dict = {"vllm": vllm_version(), "layout": "speculators"}
    hf_config = SpeculatorsConfig.from_pretrained(request.export)
    report["parsed"] = {
        key: getattr(hf_config, key, None)
        for key in (
            "architectures",
            "model_type",
            "draft_vocab_size",
            "vocab_size",
            "hidden_size",
            "head_dim",
            "num_attention_heads",
            "num_key_value_heads",
            "target_hidden_size",
            "eagle_aux_hidden_state_layer_ids",
            "norm_before_fc",
            "norm_before_residual",
            "norm_output",
            "fc_norm",
        )
    }
    report.update(serve_report(request))

    ours = load_ours(request)
    source = aux_source(request, ours.target_layer_ids)
    rows = PromptRows(ours, source.vocab_size, request.tokens)
    report["aux_states"] = type(source).__name__
    stub_attention()
    report["stubbed"] = "vllm.model_executor.models.llama.Attention -> causal SDPA"
    torch.set_default_dtype(torch.float32)

    def build():  # type: ignore[no-untyped-def]
        draft, arch, config = build_draft(
            hf_config, source.num_hidden_layers, source.vocab_size
        )
        return draft, config, {"draft_class": arch}

    report.update(check_draft(build, request, ours, source, rows))
    return report
