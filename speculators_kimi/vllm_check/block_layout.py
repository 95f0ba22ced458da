"""The check of a block drafter's export (dflash, dflash2, dspark: speculators
format, Qwen3 draft layers), with vLLM 0.34's own classes.

vLLM's parser (``SpeculatorsConfig.from_pretrained``) reads the export and names
the class (``DFlashDraftModel`` -> ``DFlashQwen3ForCausalLM``,
``DFlash2DraftModel`` -> ``DFlash2Qwen3ForCausalLM``, ``Qwen3DSparkModel`` ->
``Qwen3DSparkForCausalLM``), which ``ModelRegistry`` resolves as vLLM does. The
class is built, every parameter NaN-filled, the export loaded through its own
``load_weights`` and ``process_weights_after_loading``; the embedding (and the
output head of a full-vocabulary draft) are then shared from the verifier where
vLLM's own ``_should_share`` says vLLM's loader shares them.

One block step, as vLLM's DFlash/DSpark speculator drives it: the verifier's aux
states of ``n`` context tokens through ``combine_hidden_states`` and
``precompute_and_store_context_kv`` (positions ``0..n-1``), then the block
``[anchor, mask, ...]`` at positions ``n..n+B-1`` through ``forward`` and the
logits (DFlash: ``compute_logits``; DSpark: ``compute_draft_logits`` plus
``markov_bias(markov_embed(previous token))``, and ``compute_confidence``). Each
layer's causality is vLLM's own (``get_draft_attn_causal``), handed to the
attention as vLLM's runner hands it to the attention metadata.

Ours is the training forward: upstream's ``_backbone_forward`` on the trained
checkpoint (float32, eager attention, upstream's own anchor-block mask) with the
one anchor at position ``n`` and the same aux states as its context, plus
upstream's Markov and confidence heads for DSpark. What is stubbed is listed in
:data:`.stubs.BLOCK_STUBS`.

At Kimi-K2.5's size (hidden 7168, vocabulary 163840) the check fits a CPU box
(11.5 GiB for one draft layer): ours stays in its stored dtype until vLLM's
draft is released, both embed through the block's rows (:class:`BlockRows`),
vLLM's vocabulary-sized tensors are never filled, and one float32 head serves
both where vLLM shares the target's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..evaluate.session import cast_draft
from ..served import served_tokens
from .draft import (
    aux_source,
    build_draft,
    nan_fill,
    not_loaded,
    recorded_tensors,
    serve_report,
    vllm_version,
)
from .request import CheckRequest
from .stubs import BLOCK_STUBS, stub_block_drafter

__all__ = [
    "BlockRows",
    "block_step_inputs",
    "check_block_layout",
    "load_block_ours",
    "shared_head",
    "vllm_causality",
]

#: Parsed fields reported (those the draft's math or its serving depend on).
_PARSED = (
    "architectures",
    "draft_vocab_size",
    "vocab_size",
    "hidden_size",
    "head_dim",
    "num_hidden_layers",
    "layer_types",
    "sliding_window",
    "is_causal",
    "dflash_config",
    "target_layer_ids",
    "eagle_aux_hidden_state_layer_ids",
    "target_hidden_size",
    "mask_token_id",
    "block_size",
    "sample_from_anchor",
    "markov_rank",
    "markov_head_type",
    "enable_confidence_head",
    "confidence_head_with_markov",
)


def load_block_ours(request: CheckRequest):  # type: ignore[no-untyped-def]
    """Our draft in its stored dtype (mapped from the file; :func:`_ours_block`
    runs it after ``cast_draft`` to float32, once vLLM's draft is gone), eager
    attention (so the training forward builds upstream's float anchor-block
    mask), its frozen verifier head the LM head itself: the two have the same
    shape, and only the loss's targets read it (1.2 G parameters at Kimi-K2.5
    size, not held twice)."""
    import gc

    from speculators import SpeculatorModel, SpeculatorModelConfig

    config = SpeculatorModelConfig.from_pretrained(request.checkpoint)
    config.speculators_config.verifier.name_or_path = request.verifier
    config.transformer_layer_config._attn_implementation = "eager"
    ours = SpeculatorModel.from_pretrained(request.checkpoint, config=config).eval()
    ours.verifier_lm_head = ours.lm_head
    gc.collect()
    return ours


class BlockRows:
    """The embedding rows of the block's tokens (anchor and mask), the only
    rows either draft reads: both embed through a lookup of just these rows
    (the whole table is 4.7 GB in float32 at Kimi-K2.5 size), the same lookup
    exactly. Ours embeds through it from now on; its full table is released."""

    def __init__(self, ours, block_ids) -> None:  # type: ignore[no-untyped-def]
        self.ids = block_ids.unique()
        self.rows = ours.embed_tokens.weight.detach()[self.ids].float()
        self.module = self.lookup(self.rows)
        ours.embed_tokens = self.module

    def lookup(self, rows):  # type: ignore[no-untyped-def]
        """A module embedding the block's token ids through ``rows``."""
        import torch

        ids = self.ids

        class Lookup(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.weight = torch.nn.Parameter(rows, requires_grad=False)

            def forward(self, token_ids):  # type: ignore[no-untyped-def]
                return self.weight[torch.searchsorted(ids, token_ids)]

        return Lookup()

    def __call__(self, ids):  # type: ignore[no-untyped-def]
        return self.module(ids)


def _ours_block(ours, aux, block_ids, prev_ids):  # type: ignore[no-untyped-def]
    """Upstream's training forward for the one block at position ``n``: its
    hidden states, draft-vocabulary logits (DSpark: with the Markov bias of
    ``prev_ids``) and DSpark's confidence probabilities."""
    import torch

    n, b = aux.shape[0], block_ids.shape[0]
    total = n + b + 1  # upstream never anchors in the last block_size positions
    states = torch.zeros(1, total, aux.shape[1])
    states[0, :n] = aux
    ids = torch.zeros(1, total, dtype=torch.long)
    ids[0, n] = block_ids[0]
    loss_mask = torch.zeros(1, total)
    loss_mask[0, n] = 1
    hidden_size = ours.config.transformer_layer_config.hidden_size
    with torch.no_grad():
        hidden, logits, _, _, idx = ours._backbone_forward(
            states,
            ids,
            loss_mask,
            torch.zeros(1, total, hidden_size),
            torch.zeros(1, total, dtype=torch.long),
            max_anchors=1,
        )
        assert idx.tolist() == list(range(n, n + b)), idx  # the one anchor at n
        hidden, logits = hidden[0], logits[0]
        confidence = None
        head = getattr(ours, "markov_head", None)
        if head is not None:
            emb = head.prev_embeddings(prev_ids[None])
            logits = (
                logits
                + head.block_bias(
                    prev_token_ids=prev_ids[None],
                    hidden_states=hidden[None],
                    prev_emb=emb,
                )[0]
            )
            if getattr(ours, "confidence_head", None) is not None:
                feats = hidden
                if ours.config.confidence_head_with_markov:
                    feats = torch.cat([hidden, emb[0]], dim=-1)
                confidence = torch.sigmoid(ours.confidence_head(feats))
    return hidden, logits.float(), confidence


def _build(hf_config, request: CheckRequest, target_layers: int, target_vocab: int):  # type: ignore[no-untyped-def]
    """vLLM's draft class for the parsed config, built as its loader builds it
    (the registry's resolution, its ``VllmConfig`` with the draft's config)."""
    spec = json.loads((Path(request.export) / "config.json").read_text())
    k = served_tokens(spec)
    draft, arch, config = build_draft(
        hf_config,
        target_layers,
        target_vocab,
        draft_model={
            "model": request.export,
            "revision": None,
            "get_vocab_size": lambda: hf_config.vocab_size,
        },
        custom_ops=["none"],
        num_speculative_tokens=k,
        parallel_drafting=True,
    )
    cls = type(draft)
    module = f"{cls.__module__}.{cls.__qualname__}"
    return draft, config, {"draft_class": arch, "draft_module": module}


#: vLLM's vocabulary-sized parameters: not NaN-filled, so ``torch.empty`` leaves
#: them (4.7 GB each in float32 at Kimi-K2.5 size) untouched and never resident
#: unless the export loads them.
_VOCAB_SIZED = ("model.embed_tokens.weight", "lm_head.weight")


def shared_head(ours):  # type: ignore[no-untyped-def]
    """One float32 copy of our LM head, for vLLM's draft (where its loader shares
    the target's) and then ours."""
    import torch

    head = torch.nn.Parameter(ours.lm_head.weight.detach().float(), requires_grad=False)
    ours.lm_head.weight = head
    return head


def _load(draft, config, request: CheckRequest, ours, rows: BlockRows) -> dict:  # type: ignore[no-untyped-def]
    """NaN-fill, load the export with vLLM's ``load_weights``, post-process; then
    the embedding and (full vocabulary) head the verifier's where vLLM's own
    ``_should_share`` says its loader shares them, else the export's. vLLM's
    draft embeds through the block's rows (:class:`BlockRows`): the verifier's,
    or the export's own (``_should_share`` compares the two on those rows)."""
    import types

    import torch
    from vllm.config import set_current_vllm_config
    from vllm.v1.worker.gpu.spec_decode.eagle.utils import _should_share

    inner = draft.model
    # mask_embedding: a placeholder vLLM's loader skips unless the draft ships a
    # mask_embedding.pt (DFlash) and never reads for DSpark.
    skipped = {"model.mask_embedding"}
    nan_fill(draft, skipped | set(_VOCAB_SIZED))
    names: list[str] = []
    with set_current_vllm_config(config):
        draft.load_weights(recorded_tensors(request.export, names))
        draft.process_weights_after_loading()
    shared = []
    own_rows = rows.rows
    if any(name.endswith("embed_tokens.weight") for name in names):
        own_rows = inner.embed_tokens.weight.detach()[rows.ids].float()
    if _should_share(
        draft,
        "has_own_embed_tokens",
        types.SimpleNamespace(weight=own_rows),
        types.SimpleNamespace(weight=rows.rows),
    ):
        own_rows = rows.rows
        shared.append("model.embed_tokens.weight")
    inner.embed_tokens = rows.lookup(own_rows)  # the full table is released
    unloaded = not_loaded(draft, skipped | {"lm_head.weight"})
    head_loaded = any(name.endswith("lm_head.weight") for name in names)
    full_vocab = (
        draft.config.draft_vocab_size == ours.config.transformer_layer_config.vocab_size
    )
    if full_vocab:
        head = shared_head(ours)
        if _should_share(draft, "has_own_lm_head", draft.lm_head, ours.lm_head):
            draft.lm_head.weight = head
            shared.append("lm_head.weight")
        elif not head_loaded:
            unloaded.append("lm_head.weight")
    elif not head_loaded:
        unloaded.append("lm_head.weight")
    return {
        "tensors": sorted(names),
        "shared_from_verifier": shared,
        "embedding_rows_equal_ours": bool(torch.equal(own_rows, rows.rows)),
        "parameters_not_loaded": unloaded,
        "not_filled_unused_by_vllm": sorted(skipped),
    }


def _vllm_block(draft, config, ctx_aux, block_ids, prev_ids):  # type: ignore[no-untyped-def]
    """vLLM's block step: context K/V stored, the block run, its logits (draft
    vocabulary for DSpark, with the Markov bias; the target's for DFlash)."""
    import torch
    from vllm.config import set_current_vllm_config

    n, b = ctx_aux.shape[0], block_ids.shape[0]
    with torch.no_grad(), set_current_vllm_config(config):
        states = draft.combine_hidden_states(ctx_aux)
        draft.precompute_and_store_context_kv(states, torch.arange(n), torch.arange(n))
        hidden = draft(block_ids, torch.arange(n, n + b))
        confidence = None
        if hasattr(draft, "markov_embed"):
            emb = draft.markov_embed(prev_ids)
            logits = draft.compute_draft_logits(hidden) + draft.markov_bias(emb)
            if draft.model.confidence_head is not None:
                confidence = draft.compute_confidence(hidden, emb)
        else:
            logits = draft.compute_logits(hidden)
    return hidden, logits.float(), confidence


def vllm_causality(draft, checkpoint: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Each draft layer's causality as vLLM resolves it
    (``get_draft_attn_causal``), handed to its attention as vLLM's runner
    hands it to the attention metadata, against the causality ``checkpoint``
    was trained with."""
    from speculators_kimi.export.block import trained_causality

    vllm = [bool(c) for c in draft.get_draft_attn_causal()]
    for layer, causal in zip(draft.model.layers, vllm, strict=True):
        layer.self_attn.attn.causal = causal
    config = json.loads((Path(checkpoint) / "config.json").read_text())
    trained = list(trained_causality(config))
    return {"trained": trained, "vllm": vllm, "as_trained": trained == vllm}


def block_step_inputs(ours, source, n: int):  # type: ignore[no-untyped-def]
    """The one block step both drafts run: the aux states of ``n`` context
    tokens of a seeded prompt, the block (its next token as the anchor, then
    mask tokens) and the sequential heads' previous tokens (the anchor, then
    stand-ins for the drafted ones; shifted by one slot unless the anchor
    proposes)."""
    import torch

    b = int(ours.block_size)
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, source.vocab_size, (n + 1,), generator=gen)
    aux = source.states(prompt.tolist()).float()[:n]
    block_ids = torch.full((b,), int(ours.mask_token_id))
    block_ids[0] = prompt[n]
    prev_ids = torch.cat(
        [
            prompt[n : n + 1],
            torch.randint(0, source.vocab_size, (b - 1,), generator=gen),
        ]
    )
    if not bool(ours.config.sample_from_anchor):
        prev_ids = torch.cat([prev_ids[:1], prev_ids[:-1]])
    return aux, block_ids, prev_ids


def _compare(theirs, mine, draft_to_target, vocab: int) -> dict:  # type: ignore[no-untyped-def]
    import torch

    if theirs.shape[-1] != mine.shape[-1]:  # DFlash: vLLM's over the target vocab
        full = mine.new_full((mine.shape[0], vocab), float("-inf"))
        full[:, draft_to_target] = mine
        mine = full
    finite = torch.isfinite(mine)
    diff = float((theirs[finite] - mine[finite]).abs().max())
    scale = float(mine[finite].abs().max())
    return {
        "max_abs_logit_diff": diff,
        "max_abs_logit": scale,
        "max_rel_logit_diff": diff / scale if scale else diff,
        "same_masked_tokens": bool(torch.equal(finite, torch.isfinite(theirs))),
        "same_argmax": bool(torch.equal(theirs.argmax(-1), mine.argmax(-1))),
    }


def check_block_layout(request: CheckRequest) -> dict[str, Any]:
    """A block drafter's export as vLLM parses, builds and loads it; one block
    step against the training forward of the checkpoint."""
    import gc

    import torch
    from vllm.transformers_utils.configs.speculators.base import SpeculatorsConfig

    report: dict[str, Any] = {"vllm": vllm_version(), "layout": "speculators"}
    hf_config = SpeculatorsConfig.from_pretrained(request.export)
    report["parsed"] = {key: getattr(hf_config, key, None) for key in _PARSED}
    report.update(serve_report(request))

    ours = load_block_ours(request)
    source = aux_source(request, ours.target_layer_ids)
    report["aux_states"] = type(source).__name__
    stub_block_drafter()
    report["stubbed"] = BLOCK_STUBS
    torch.set_default_dtype(torch.float32)

    b = int(ours.block_size)
    n = request.tokens
    aux, block_ids, prev_ids = block_step_inputs(ours, source, n)
    rows = BlockRows(ours, block_ids)
    gc.collect()

    draft, config, built = _build(
        hf_config, request, source.num_hidden_layers, source.vocab_size
    )
    report.update(built)
    report.update(_load(draft, config, request, ours, rows))
    report["causality"] = vllm_causality(draft, request.checkpoint)
    _, theirs, their_conf = _vllm_block(draft, config, aux, block_ids, prev_ids)
    # vLLM's config holds its layers (the static forward context): drop both
    # before ours is upcast, so the two float32 drafts are never resident at once.
    del draft, config
    gc.collect()

    ours = cast_draft(ours, torch.float32)
    _, mine, my_conf = _ours_block(ours, aux, block_ids, prev_ids)
    vocab = torch.arange(ours.draft_vocab_size)
    d2t = ours.d2t
    draft_to_target = vocab if d2t is None else vocab + d2t
    step: dict[str, Any] = {"context_tokens": n, "tokens": b}
    step.update(_compare(theirs, mine, draft_to_target, source.vocab_size))
    if their_conf is not None and my_conf is not None:
        step["max_abs_confidence_diff"] = float((their_conf - my_conf).abs().max())
    report["one_step"] = step
    return report
