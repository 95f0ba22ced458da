"""The check of an XPress export (native layout, :mod:`..export.xpress`), the way
``vllm serve VERIFIER --speculative-config '{"method": "dflash", "model":
EXPORT, "num_speculative_tokens": B - 1}'`` takes it: vLLM's ``ModelConfig`` for
the target and ``SpeculativeConfig`` for the draft (the class's own
``XPressSpeculatorConfig`` is chosen), the class ``ModelRegistry`` resolves
(``Qwen3XPressForCausalLM``) built under that ``VllmConfig``, every parameter
NaN-filled, the export loaded through its own ``load_weights`` (which folds the
raw mixer) and ``process_weights_after_loading``; the verifier's embedding and
head then shared as vLLM's loader shares them.

One block step, as vLLM's ``XPressSpeculator`` drives it: the context's aux
states through ``combine_hidden_states`` and ``precompute_and_store_context_kv``,
the block ``[anchor, mask, ...]`` through ``forward``, the base logits
(``compute_draft_logits``), then the refiner's bias for a block of previous
tokens (the anchor standing in for its own predecessor, as vLLM's speculator
has it), through ``XPressRefinerHead.hidden_cache`` and ``refine_bias``: the
math of one Jacobi pass, which vLLM runs in Triton kernels over the base
logits' top-C. Ours is upstream's training forward with its
``refiner_head.block_bias`` for the same tokens.

Then the block vLLM drafts: its own ``jacobi_refine_greedy`` (the export's
passes and top-C), whose Triton kernels have no CPU path in vLLM's wheel, run
by Triton's interpreter in a process of its own (:mod:`.xpress_kernels`),
against ``evaluate``'s :func:`..evaluate.jacobi.jacobi_block` on ours. What is
stubbed: :data:`.stubs.BLOCK_STUBS`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..evaluate.jacobi import jacobi_block
from ..evaluate.session import cast_draft
from ..served import SERVE_METHOD
from .block_layout import (
    BlockRows,
    _compare,
    _load,
    _ours_block,
    block_step_inputs,
    load_block_ours,
    vllm_causality,
)
from .draft import (
    aux_source,
    build_native_draft,
    cpu_vllm_config,
    native_speculative_config,
    vllm_version,
)
from .native_mla import _text_target
from .request import CheckRequest
from .stubs import BLOCK_STUBS, stub_block_drafter

__all__ = ["check_xpress"]

_PARSED = (
    "architectures",
    "vocab_size",
    "draft_vocab_size",
    "hidden_size",
    "head_dim",
    "num_hidden_layers",
    "layer_types",
    "is_causal",
    "dflash_config",
    "target_hidden_size",
    "sample_from_anchor",
    "xpress_block_size",
    "xpress_rank",
    "xpress_mlp_hidden",
    "xpress_num_passes",
    "xpress_topc",
)


def _configs(request: CheckRequest, target_dir: str, block: int):  # type: ignore[no-untyped-def]
    from vllm.config import ModelConfig

    target = ModelConfig(model=target_dir, dtype="float32")
    k = request.num_speculative_tokens
    # the serve line's count unless the check is asked another
    tokens = block - 1 if k is None else k
    method = SERVE_METHOD["xpress"]
    spec = native_speculative_config(target, request.export, method, tokens)
    return spec, cpu_vllm_config(target, spec)


def _vllm_jacobi(export: str, hidden, base, anchor: int) -> list[int]:  # type: ignore[no-untyped-def]
    """The block vLLM's speculator drafts from this step (its own
    ``jacobi_refine_greedy``, the export's passes and top-C, the anchor standing
    in for its predecessor as ``XPressSpeculator._jacobi_refine`` has it): its
    Triton kernels run by Triton's interpreter in a process of its own
    (:mod:`.xpress_kernels`)."""
    import os
    import subprocess
    import sys
    import tempfile

    import torch

    with tempfile.TemporaryDirectory(prefix="xpress-kernels-") as scratch:
        inputs = Path(scratch) / "inputs.pt"
        torch.save(
            {"export": export, "hidden": hidden, "base": base, "anchor": anchor},
            inputs,
        )
        proc = subprocess.run(
            [sys.executable, "-m", "speculators_kimi.vllm_check.xpress_kernels"]
            + [str(inputs)],
            env=dict(os.environ, TRITON_INTERPRET="1"),
            capture_output=True,
            text=True,
            check=False,
        )
    if proc.returncode != 0:
        raise RuntimeError(
            f"vLLM's XPress kernels under Triton's interpreter failed:\n"
            f"{proc.stderr[-4000:]}"
        )
    return [int(t) for t in json.loads(proc.stdout.strip().splitlines()[-1])]


def _vllm_block(draft, config, ctx_aux, block_ids, prev_ids):  # type: ignore[no-untyped-def]
    """vLLM's block: base logits over the target vocabulary and the refiner's
    bias for ``prev_ids`` (its class's ``refine_bias``, not the instance's
    ``torch.compile`` wrapper)."""
    import torch
    from vllm.config import set_current_vllm_config

    n, b = ctx_aux.shape[0], block_ids.shape[0]
    with torch.no_grad(), set_current_vllm_config(config):
        states = draft.combine_hidden_states(ctx_aux)
        draft.precompute_and_store_context_kv(states, torch.arange(n), torch.arange(n))
        hidden = draft(block_ids, torch.arange(n, n + b))
        base = draft.compute_draft_logits(hidden)
        head = draft.model.xpress_head
        cache = head.hidden_cache(hidden[None])
        bias = type(head).refine_bias(head, prev_ids[None], cache)[0]
    return hidden, base.float(), (base + bias).float()


def _ours(ours, aux, block_ids, prev_ids):  # type: ignore[no-untyped-def]
    import torch

    hidden, base, _ = _ours_block(ours, aux, block_ids, prev_ids)
    with torch.no_grad():
        bias = ours.refiner_head.block_bias(prev_ids[None], hidden_states=hidden[None])
    return hidden, base, base + bias[0].float()


def check_xpress(request: CheckRequest, exported: dict[str, Any]) -> dict:
    """The XPress export as vLLM parses, builds and loads it; one block step's
    base and refined logits against the training forward of the checkpoint,
    and the block vLLM's Jacobi kernels draft against ``evaluate``'s."""
    import gc
    import shutil
    import tempfile

    import torch
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import (
        get_eagle3_aux_layers_from_config,
    )
    from vllm.v1.worker.gpu.spec_decode.speculator_config import (
        get_speculator_config_class,
    )

    report: dict[str, Any] = {"vllm": vllm_version(), "layout": "native"}
    block = int(exported["xpress_block_size"])
    scratch = Path(tempfile.mkdtemp(prefix="vllm-check-"))
    try:
        target_dir, stand_in = _text_target(request.verifier, scratch / "target")
        report["target_config"] = stand_in or request.verifier
        spec, config = _configs(request, target_dir, block)
        hf = spec.draft_model_config.hf_config
        report["parsed"] = {
            "hf_config_class": type(hf).__name__,
            **{key: getattr(hf, key, None) for key in _PARSED},
        }
        report["serve"] = {
            "method": spec.method,
            "speculator_config": get_speculator_config_class(spec).__name__,
            "num_speculative_tokens": spec.num_speculative_tokens,
            "xpress_block_size": block,
        }
        torch.set_default_dtype(torch.float32)
        ours = load_block_ours(request)
        aux_layers = list(get_eagle3_aux_layers_from_config(spec) or [])
        report["aux_layers"] = {
            "vllm": aux_layers,
            "trained": list(ours.target_layer_ids),
        }
        source = aux_source(request, ours.target_layer_ids)
        report["aux_states"] = type(source).__name__
        stub_block_drafter()
        report["stubbed"] = BLOCK_STUBS
        draft, built = build_native_draft(config, spec)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report.update(built)
    aux, block_ids, prev_ids = block_step_inputs(ours, source, request.tokens)
    rows = BlockRows(ours, block_ids)
    gc.collect()
    report.update(_load(draft, config, request, ours, rows))
    report["causality"] = vllm_causality(draft, request.checkpoint)
    hidden, their_base, theirs = _vllm_block(draft, config, aux, block_ids, prev_ids)
    # vLLM's draft released before ours is upcast: never two float32 drafts.
    del draft, config
    gc.collect()
    ours = cast_draft(ours, torch.float32)
    my_hidden, my_base, mine = _ours(ours, aux, block_ids, prev_ids)
    # The drafted block, when every parameter loaded and the block is served
    # whole (else the report already fails on that).
    report["jacobi"] = None
    served_whole = report["serve"]["num_speculative_tokens"] == block - 1
    if served_whole and not report["parameters_not_loaded"]:
        passes = int(exported["xpress_num_passes"])
        topc = int(exported["xpress_topc"])
        anchor = int(block_ids[0])
        their_block = _vllm_jacobi(request.export, hidden, their_base, anchor)
        my_block = jacobi_block(
            ours.refiner_head, my_base, my_hidden, anchor, passes=passes, topc=topc
        )
        report["jacobi"] = {
            "passes": passes,
            "topc": topc,
            "vllm": their_block,
            "evaluate": my_block,
            "base_argmax": my_base[1:].argmax(-1).tolist(),
            "same": their_block == my_block,
        }
    vocab = torch.arange(ours.draft_vocab_size)
    step: dict[str, Any] = {"context_tokens": request.tokens, "tokens": block}
    step.update(_compare(theirs, mine, vocab, source.vocab_size))
    base = _compare(their_base, my_base, vocab, source.vocab_size)
    step["base_max_rel_logit_diff"] = base["max_rel_logit_diff"]
    report["one_step"] = step
    return report
