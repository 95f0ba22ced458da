"""The check of a native MLA export, the way ``vllm serve VERIFIER
--speculative-config`` takes it (``Eagle3DeepseekV3ForCausalLM``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .draft import (
    PromptRows,
    aux_source,
    check_draft,
    cpu_vllm_config,
    load_ours,
    native_speculative_config,
    vllm_version,
)
from .request import CheckRequest
from .stubs import MLA_STUB, init_single_process, stub_mla_attention

__all__ = ["check_native_mla"]


def _text_target(verifier: str, scratch: Path) -> tuple[str, str | None]:
    """The target directory vLLM's ``ModelConfig`` reads: the verifier itself, or
    for a multimodal one a text-only stand-in (its ``text_config``, its tokenizer
    files; no weights: only the config is read)."""
    import shutil

    config = json.loads((Path(verifier) / "config.json").read_text())
    text = config.get("text_config")
    if not text:
        return verifier, None
    scratch.mkdir(parents=True, exist_ok=True)
    if not text.get("architectures"):
        # A nested text config may name none; vLLM's ModelConfig needs one:
        # transformers' causal LM class for its model type, or DeepSeek-V3's for
        # an MLA text model transformers does not map (Kimi's ``kimi_k2``).
        from transformers.models.auto.modeling_auto import (
            MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        )

        arch = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(text.get("model_type", ""))
        if arch is None and "kv_lora_rank" in text:
            arch = "DeepseekV3ForCausalLM"
        if arch is not None:
            text = dict(text, architectures=[arch])
    (scratch / "config.json").write_text(json.dumps(text, indent=2))
    for item in Path(verifier).iterdir():
        if item.is_file() and (
            item.name.startswith(("tokenizer", "special_tokens", "chat_template"))
            or item.suffix in (".model", ".tiktoken")
        ):
            shutil.copy2(item, scratch / item.name)
    why = (
        f"text-only stand-in of {verifier} ({config.get('architectures')}): its "
        f"text_config ({text.get('architectures')}, model_type "
        f"{text.get('model_type')}) and tokenizer"
    )
    return str(scratch), why


#: ``--num-speculative-tokens`` of an MLA EAGLE-3 check when none is given.
EAGLE3_DEFAULT_TOKENS = 3


def _parsed(draft_config: Any) -> dict[str, Any]:
    """What vLLM parsed from the export: its config class, layout and MLA fields."""
    from speculators.models.eagle3.model_definitions import MLA_FIELDS

    hf = draft_config.hf_config
    inner_model = getattr(hf, "model", None)
    keys: list[str] = ["vocab_size", "draft_vocab_size", "hidden_size"]
    keys += ["target_hidden_size", "num_hidden_layers", "num_attention_heads"]
    keys += [*MLA_FIELDS, "rope_parameters", "eagle_aux_hidden_state_layer_ids"]
    keys += ["eagle_config", "norm_before_residual", "norm_output", "fc_norm"]
    return {
        "hf_config_class": type(hf).__name__,
        "model_type": hf.model_type,
        "wrapped_model_type": getattr(inner_model, "model_type", None),
        "architectures": list(draft_config.architectures),
        "architecture": draft_config.architecture,
        "use_mla": bool(draft_config.use_mla),
        "head_size": draft_config.get_head_size(),
        **{key: getattr(hf, key, None) for key in keys},
    }


def _serve_probes(
    target: Any, export: str, exported: dict, scratch: Path, k: int
) -> dict[str, Any]:
    """How vLLM takes the export served alone, and labelled ``deepseek_v3``."""
    # `vllm serve EXPORT`: vLLM finds no draft in it (no speculators_config),
    # so it would serve the draft itself as the model.
    from vllm.transformers_utils.config import maybe_override_with_speculators

    _, _, alone = maybe_override_with_speculators(export, None, False)
    # The same export labelled deepseek_v3: what vLLM 0.33 does with it.
    relabelled = scratch / "as-deepseek_v3"
    relabelled.mkdir()
    (relabelled / "config.json").write_text(
        json.dumps(dict(exported, model_type="deepseek_v3"))
    )
    try:
        native_speculative_config(target, str(relabelled), "eagle3", k)
        refused = None
    except Exception as err:  # pydantic's ValidationError (a ValueError)
        refused = str(err).split("Supported architectures")[0].strip()
    return {"serve_dir_speculative": alone, "deepseek_v3_refused": refused}


def check_native_mla(request: CheckRequest, exported: dict) -> dict:
    """The native MLA export as vLLM parses and builds it; one step against ours."""
    import shutil
    import tempfile

    import torch
    from vllm.config import (
        ModelConfig,
        set_current_vllm_config,
    )
    from vllm.model_executor.models.registry import ModelRegistry

    report: dict = {"vllm": vllm_version(), "layout": "native"}
    scratch = Path(tempfile.mkdtemp(prefix="vllm-check-"))
    try:
        target_dir, stand_in = _text_target(request.verifier, scratch / "target")
        report["target_config"] = stand_in or request.verifier
        target = ModelConfig(model=target_dir, dtype="float32")
        k = request.num_speculative_tokens or EAGLE3_DEFAULT_TOKENS
        # What `vllm serve VERIFIER --speculative-config {"model": EXPORT,
        # "method": "eagle3", ...}` builds for the draft.
        spec = native_speculative_config(target, request.export, "eagle3", k)
        draft_config = spec.draft_model_config
        report["parsed"] = _parsed(draft_config)
        report["serve"] = {"method": spec.method, "num_speculative_tokens": k}
        report.update(_serve_probes(target, request.export, exported, scratch, k))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    ours = load_ours(request)
    source = aux_source(request, ours.target_layer_ids)
    rows = PromptRows(ours, source.vocab_size, request.tokens)
    report["aux_states"] = type(source).__name__
    stub_mla_attention()
    report["stubbed"] = MLA_STUB
    torch.set_default_dtype(torch.float32)

    def build():  # type: ignore[no-untyped-def]
        config = cpu_vllm_config(target, spec)
        with set_current_vllm_config(config):
            init_single_process()
            cls, arch = ModelRegistry.resolve_model_cls(
                draft_config.architectures, model_config=draft_config
            )
            draft = cls(vllm_config=config)
        module = f"{cls.__module__}.{cls.__qualname__}"
        return draft, config, {"draft_class": arch, "draft_module": module}

    report.update(check_draft(build, request, ours, source, rows))
    return report
