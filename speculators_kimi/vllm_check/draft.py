"""vLLM's draft class built, an export loaded through its own ``load_weights``,
and one draft step compared with ours."""

from __future__ import annotations

from collections.abc import Collection

from .request import CheckRequest
from .stubs import init_single_process

__all__ = [
    "PromptRows",
    "SyntheticAux",
    "VerifierAux",
    "aux_source",
    "build_draft",
    "check_draft",
    "compare_step",
    "cpu_vllm_config",
    "export_tensors",
    "load_and_check",
    "load_ours",
    "nan_fill",
    "not_loaded",
    "recorded_tensors",
    "serve_report",
    "vllm_step",
]


def vllm_version() -> str:
    """The version of the vLLM this (scratch) interpreter imports."""
    import vllm

    return str(vllm.__version__)


def load_ours(request: CheckRequest):  # type: ignore[no-untyped-def]
    """Our draft in the dtype it was saved in (mapped from the file, so nearly
    no anonymous memory), without the frozen verifier head only training's loss
    reads (0.9 GB at Kimi-K2.5 size). :func:`compare_step` upcasts what the
    step computes with, after vLLM's draft is gone."""
    import gc

    from speculators_kimi.evaluate import load_draft

    ours = load_draft(request.checkpoint, None, request.verifier)
    del ours.verifier_lm_head
    gc.collect()
    return ours


class PromptRows:
    """The prompt both drafts are stepped over, and its embedding rows.

    Only the prompt's rows of the embedding are ever read, and the whole table
    is 4.7 GB in float32 at Kimi-K2.5 size (twice: ours and vLLM's). Both drafts
    therefore embed through a table of just these rows, indexed by
    ``local_ids``: the same lookup, exactly, in a few kB.
    """

    def __init__(self, ours, vocab_size: int, tokens: int) -> None:  # type: ignore[no-untyped-def]
        import torch

        gen = torch.Generator().manual_seed(0)
        prompt = torch.randint(0, vocab_size, (tokens,), generator=gen)
        self.prompt: list[int] = prompt.tolist()
        self.unique, self.local_ids = prompt.unique(return_inverse=True)
        self.rows = ours.embed_tokens.weight.detach()[self.unique].float()
        # Ours embeds through the rows from now on; the full table is released.
        ours.embed_tokens.weight = torch.nn.Parameter(self.rows, requires_grad=False)
        ours.embed_tokens.padding_idx = None  # a gradient-only index, out of range


class VerifierAux:
    """A prompt's aux hidden states from the verifier's decoder (as evaluate
    computes them): what vLLM's target would hand the draft."""

    def __init__(self, verifier: str, layer_ids: list[int]) -> None:
        from speculators_kimi.verifier.causal import load_causal_verifier

        self.verifier = load_causal_verifier(verifier, layer_ids)
        self.vocab_size = int(self.verifier.text_config.vocab_size)
        self.num_hidden_layers = int(self.verifier.text_config.num_hidden_layers)

    def states(self, prompt: list[int]):  # type: ignore[no-untyped-def]
        from speculators_kimi.verifier.cache import verifier_cache

        return self.verifier.forward(prompt, verifier_cache(self.verifier.decoder))[1]


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


def aux_source(request: CheckRequest, layer_ids: list[int]):  # type: ignore[no-untyped-def]
    """The aux states the check feeds both drafts (``--synthetic-aux-states``)."""
    cls = SyntheticAux if request.synthetic_aux_states else VerifierAux
    return cls(request.verifier, list(layer_ids))


def export_tensors(export: str):  # type: ignore[no-untyped-def]
    """The export's tensors, one at a time (nothing held beyond the one loaded)."""
    from pathlib import Path

    from safetensors import safe_open

    with safe_open(str(Path(export) / "model.safetensors"), framework="pt") as f:
        for name in f.keys():  # noqa: SIM118 - safe_open has no iterator
            yield name, f.get_tensor(name)


def recorded_tensors(export: str, names: list[str]):  # type: ignore[no-untyped-def]
    """:func:`export_tensors`, each name added to ``names`` as vLLM's loader
    takes it."""
    for name, tensor in export_tensors(export):
        names.append(name)
        yield name, tensor


def nan_fill(draft, skipped: Collection[str] = ()) -> None:  # type: ignore[no-untyped-def]
    """Every parameter of ``draft`` but ``skipped`` NaN (integers -1), so that
    what no export tensor reaches shows in :func:`not_loaded`."""
    import torch

    with torch.no_grad():
        for name, p in draft.named_parameters():
            if name not in skipped:
                p.fill_(float("nan")) if p.is_floating_point() else p.fill_(-1)


def not_loaded(draft, skipped: Collection[str] = ()) -> list[str]:  # type: ignore[no-untyped-def]
    """The parameters of ``draft`` but ``skipped`` still as :func:`nan_fill`
    left them."""
    return [
        name
        for name, p in draft.named_parameters()
        if name not in skipped
        and (p.isnan().any() if p.is_floating_point() else (p < 0).all())
    ]


def cpu_vllm_config(target, spec):  # type: ignore[no-untyped-def]
    """The ``VllmConfig`` a served draft is built under here: the target's and
    the speculative config on CPU, with ``custom_ops`` none (vLLM's own switch
    to each op's forward_native: the compiled vllm._C kernels are absent)."""
    from vllm.config import CompilationConfig, CompilationMode, DeviceConfig, VllmConfig

    return VllmConfig(
        model_config=target,
        speculative_config=spec,
        device_config=DeviceConfig(device="cpu"),
        compilation_config=CompilationConfig(
            mode=CompilationMode.NONE, custom_ops=["none"]
        ),
    )


def native_speculative_config(  # type: ignore[no-untyped-def]
    target, export: str, method: str, tokens: int | None
):
    """The draft's ``SpeculativeConfig`` as ``vllm serve TARGET
    --speculative-config '{"method": METHOD, "model": EXPORT, ...}'`` builds it
    (``tokens`` None: ``num_speculative_tokens`` left to vLLM)."""
    from vllm.config import ParallelConfig, SpeculativeConfig

    return SpeculativeConfig(
        model=export,
        method=method,
        target_model_config=target,
        target_parallel_config=ParallelConfig(),
        **({} if tokens is None else {"num_speculative_tokens": tokens}),
    )


def build_native_draft(config, spec):  # type: ignore[no-untyped-def]
    """The class vLLM's ``ModelRegistry`` resolves for a native export's draft
    config, built under ``config`` in a one-process group, and what was built."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.models.registry import ModelRegistry
    from vllm.v1.worker.workspace import init_workspace_manager

    from .stubs import init_single_process

    draft_config = spec.draft_model_config
    with set_current_vllm_config(config):
        init_single_process()
        init_workspace_manager(torch.device("cpu"))
        cls, arch = ModelRegistry.resolve_model_cls(
            draft_config.architectures, model_config=draft_config
        )
        draft = cls(vllm_config=config)
    module = f"{cls.__module__}.{cls.__qualname__}"
    return draft, {"draft_class": arch, "draft_module": module}


def serve_report(request: CheckRequest) -> dict:
    """What ``vllm serve EXPORT`` makes of the export (vLLM's
    ``maybe_override_with_speculators``: the verifier it serves, its
    speculative config), and why it refuses the original checkpoint."""
    from vllm.transformers_utils.config import maybe_override_with_speculators

    model, tokenizer, spec = maybe_override_with_speculators(
        request.export, None, False
    )
    report: dict = {
        "serve": {"model": model, "tokenizer": tokenizer, "speculative": spec}
    }
    try:
        maybe_override_with_speculators(request.checkpoint, None, False)
        report["checkpoint_refused"] = None
    except ValueError as err:
        report["checkpoint_refused"] = str(err)
    return report


def build_draft(  # type: ignore[no-untyped-def]
    hf_config,
    target_layers: int,
    target_vocab: int,
    *,
    draft_model: dict | None = None,
    custom_ops: list[str] | None = None,
    **speculative,
):
    """vLLM's draft class for the parsed ``hf_config``, resolved by its own
    registry and built under a ``VllmConfig`` holding the two configs a draft
    reads: its own (``draft_model``: more of the draft ``ModelConfig``'s fields)
    and the target's size (``speculative``: more fields of the speculative
    config).

    :returns: the draft, its architecture and the ``VllmConfig``.
    """
    import types

    import torch
    from vllm.config import (
        CompilationConfig,
        CompilationMode,
        DeviceConfig,
        VllmConfig,
        set_current_vllm_config,
    )
    from vllm.model_executor.models.registry import ModelRegistry

    if custom_ops is None:
        config = VllmConfig(device_config=DeviceConfig(device="cpu"))
        config.compilation_config.mode = CompilationMode.NONE
    else:
        config = VllmConfig(
            device_config=DeviceConfig(device="cpu"),
            compilation_config=CompilationConfig(
                mode=CompilationMode.NONE, custom_ops=custom_ops
            ),
        )
    config.speculative_config = types.SimpleNamespace(  # type: ignore[assignment]
        draft_model_config=types.SimpleNamespace(
            hf_config=hf_config, quantization=None, **(draft_model or {})
        ),
        **{"parallel_drafting": False, **speculative},
    )
    config.model_config = types.SimpleNamespace(  # type: ignore[assignment]
        get_total_num_hidden_layers=lambda: target_layers,
        get_vocab_size=lambda: target_vocab,
        # vLLM builds the draft in the target's dtype; float32 here, as ours.
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


def load_and_check(draft, config, export: str, rows: PromptRows) -> dict:  # type: ignore[no-untyped-def]
    """NaN-fill ``draft``, load the export's tensors (streamed) with its
    ``load_weights``; what no tensor reached. The embedding then holds the
    prompt's rows (:class:`PromptRows`): the verifier's, shared as vLLM's
    proposer shares them when the export has none, else the export's own.

    The embedding is not NaN-filled: ``torch.empty`` leaves its 4.7 GB (at
    Kimi-K2.5 size) untouched, so never resident, unless the export loads it.
    """
    import torch
    from vllm.config import set_current_vllm_config

    embedding = draft.model.embed_tokens.weight
    with torch.no_grad():
        for p in draft.parameters():
            if p is embedding:
                continue
            p.fill_(float("nan")) if p.is_floating_point() else p.fill_(-1)
    names: list[str] = []
    with set_current_vllm_config(config):
        draft.load_weights(recorded_tensors(export, names))
    shared = []
    embedded = any(name.endswith("embed_tokens.weight") for name in names)
    if embedded:
        own = embedding.detach()[rows.unique].float()
        same_rows = bool(torch.equal(own, rows.rows))
        embedding.data = own
    else:  # vLLM's proposer shares the target's embedding
        embedding.data = rows.rows
        shared.append("model.embed_tokens.weight")
        same_rows = True
    unloaded = [
        name
        for name, p in draft.named_parameters()
        if p is not embedding
        and (p.isnan().any() if p.is_floating_point() else (p < 0).all())
    ]
    return {
        "tensors": sorted(names),
        "shared_from_verifier": shared,
        "parameters_not_loaded": unloaded,
        "embedding_rows_equal_ours": same_rows,
        "embedding_sharing": embedding_sharing(draft, rows),
    }


def embedding_sharing(draft, rows: PromptRows) -> dict | None:  # type: ignore[no-untyped-def]
    """Whose input embedding vLLM's own loader gives the loaded draft, for a
    verifier whose embedding is plain and for one whose embedding is quantized
    (packed weights, no ``weight``): ``"target"`` (shared) or ``"draft"`` (its
    own). vLLM 0.34's ``_should_share`` (``v1/worker/gpu/spec_decode/eagle/
    utils.py``, used by ``maybe_share_target_embed``) decides, after the draft's
    ``load_weights`` set ``has_own_embed_tokens`` from the export's tensors;
    the copies are compared on the prompt's rows. None on a vLLM without it."""
    import types

    try:
        from vllm.v1.worker.gpu.spec_decode.eagle.utils import _should_share
    except ImportError:
        return None
    own = types.SimpleNamespace(weight=draft.model.embed_tokens.weight)
    targets = {
        "plain": types.SimpleNamespace(weight=rows.rows),
        "quantized": types.SimpleNamespace(weight_packed=rows.rows),
    }
    flag = "has_own_embed_tokens"
    return {
        kind: "target" if _should_share(draft, flag, own, target) else "draft"
        for kind, target in targets.items()
    }


def vllm_step(draft, config, rows: PromptRows, aux):  # type: ignore[no-untyped-def]
    """vLLM's draft step over the prompt: its ``combine_hidden_states``,
    ``forward`` and ``compute_logits`` (float32 logits over the target vocabulary)."""
    import torch
    from vllm.config import set_current_vllm_config

    ids = rows.local_ids[1:]
    with torch.no_grad(), set_current_vllm_config(config):
        states = draft.combine_hidden_states(aux[:-1])
        # vLLM runs the pair (x[j+1], g[j]) at the target's position j.
        hidden, _ = draft(ids, torch.arange(len(rows.prompt) - 1), states)
        return draft.compute_logits(hidden).float()


def compare_step(ours, rows: PromptRows, aux, theirs, vocab: int) -> dict:  # type: ignore[no-untyped-def]
    """Our ``DraftRunner`` over the same inputs (upcast to float32 now, with its
    exact buffers kept), against vLLM's logits ``theirs``."""
    import torch

    from speculators_kimi.evaluate import DraftRunner
    from speculators_kimi.evaluate.session import cast_draft

    runner = DraftRunner(cast_draft(ours, torch.float32), "cpu")
    _, logits = runner.step(rows.local_ids[1:], runner.project(aux[:-1]), 1)
    mine = logits.new_full((logits.shape[0], vocab), float("-inf"))
    mine[:, runner.draft_to_target] = logits
    finite = torch.isfinite(mine)
    diff = float((theirs[finite] - mine[finite]).abs().max())
    scale = float(mine[finite].abs().max())
    return {
        "tokens": len(rows.prompt) - 1,
        "max_abs_logit_diff": diff,
        "max_abs_logit": scale,
        "max_rel_logit_diff": diff / scale if scale else diff,
        "same_masked_tokens": bool(torch.equal(finite, torch.isfinite(theirs))),
        "same_argmax": bool(torch.equal(theirs.argmax(-1), mine.argmax(-1))),
    }


def check_draft(build, request: CheckRequest, ours, source, rows: PromptRows) -> dict:  # type: ignore[no-untyped-def]
    """vLLM's draft from ``build()`` (``(draft, config, report)``) loaded and
    stepped, then released before ours is upcast and stepped on the same inputs:
    the two float32 drafts are never resident together (4.8 GB each at
    Kimi-K2.5 size)."""
    import gc

    draft, config, report = build()
    report.update(load_and_check(draft, config, request.export, rows))
    aux = source.states(rows.prompt)
    theirs = vllm_step(draft, config, rows, aux)
    # vLLM's config holds its layers (the static forward context): drop both.
    del draft, config
    gc.collect()
    report["one_step"] = compare_step(ours, rows, aux, theirs, source.vocab_size)
    return report
