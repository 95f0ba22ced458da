# SPDX-License-Identifier: Apache-2.0
"""One torchrun rank of the sequence-parallel exactness check (gloo, CPU, fp64).

``python -m torch.distributed.run --nproc-per-node W sp_worker.py OUT``: every rank
builds the same tiny Llama EAGLE-3 draft (two layers, one with a sliding
window) and batches; the one-process loss and
gradients are computed on each rank, then the same step runs split over the SP
group (the model wrapped in DDP, which averages gradients over the world as the
trainer does). Rank 0 writes ``OUT`` (JSON): per case, the largest absolute
difference of the loss and of every parameter's gradient. Cases: ``eager`` and
``sdpa`` at ``sp_size = W``; ``per_chunk_shift`` (eager, the TTT shift and loss
cut done per chunk, PR #871's way: a negative control); with ``W = 4`` also
``sp2_dp2`` (two SP groups of two, each on its own batch, against the mean of the
two one-process gradients).
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from transformers import LlamaConfig

from speculators.config import SpeculatorsConfig, VerifierConfig
from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
from speculators.models.eagle3 import sequence_parallel as sp
from speculators.proposals.greedy import GreedyTokenProposalConfig
from speculators.train import distributed as train_dist

SEQ_LEN = 48
VOCAB = 64
HIDDEN = 32
TTT_STEPS = 3
DOCS = [0] * 13 + [1] * 20 + [2] * 9 + [-1] * 6


def tiny_draft(attn_impl: str) -> Eagle3DraftModel:
    torch.manual_seed(0)
    # upstream's CLI default: sliding layers unless --full-attention-indices
    sliding: dict[str, Any] = {
        "layer_types": ["sliding_attention", "full_attention"],
        "sliding_window": 5,
    }
    layer_config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=8,
        max_position_embeddings=256,
        **sliding,
    )
    layer_config._attn_implementation = attn_impl
    config = Eagle3SpeculatorConfig(
        transformer_layer_config=layer_config,
        draft_vocab_size=VOCAB,
        norm_before_residual=False,
        eagle_aux_hidden_state_layer_ids=[0, 1, 2],
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=TTT_STEPS)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(
                name_or_path=None, architectures=["LlamaForCausalLM"]
            ),
        ),
    )
    model = Eagle3DraftModel(config)
    for weight in (
        model.embed_tokens.weight,
        model.lm_head.weight,
        model.verifier_lm_head.weight,
    ):
        torch.nn.init.normal_(weight, std=0.5)
    return model


def batch(seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    doc_ids = torch.tensor([DOCS])
    positions = torch.zeros_like(doc_ids)
    for doc in doc_ids.unique():
        where = doc_ids == doc
        positions[where] = torch.arange(1, int(where.sum()) + 1)
    loss_mask = (doc_ids != -1) & (torch.rand(1, SEQ_LEN, generator=gen) < 0.8)
    return {
        "hidden_states": torch.randn(1, SEQ_LEN, 3 * HIDDEN, generator=gen),
        "input_ids": torch.randint(0, VOCAB, (1, SEQ_LEN), generator=gen),
        "document_ids": doc_ids,
        "loss_mask": loss_mask,
        "position_ids": positions,
        "verifier_last_hidden_states": torch.randn(1, SEQ_LEN, HIDDEN, generator=gen),
    }


def kl_div_fp64(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Upstream's eager KL term in the inputs' dtype (it computes in fp32)."""
    draft_logq = torch.nn.functional.log_softmax(logits, dim=-1)
    target_logp = torch.nn.functional.log_softmax(targets, dim=-1)
    return torch.nn.functional.kl_div(
        target_logp, draft_logq, reduction="none", log_target=True
    ).sum(dim=-1)


def call_kwargs() -> dict:
    return {
        "ttt_steps": TTT_STEPS,
        "ttt_step_loss_decay": 0.8,
        "loss_config": {"kl_div": (kl_div_fp64, 1.0)},
    }


def one_process(model: Eagle3DraftModel, data: dict) -> dict[str, torch.Tensor]:
    model = copy.deepcopy(model)
    _, loss, _ = model(**data, **call_kwargs())
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    return {"loss": loss.detach(), **grads}


def sequence_parallel(
    model: Eagle3DraftModel, data: dict, sp_size: int
) -> dict[str, torch.Tensor]:
    ddp = DistributedDataParallel(copy.deepcopy(model))
    rank_data = sp.split_batch(
        data, train_dist.get_sp_rank(), sp_size, ttt_steps=TTT_STEPS
    )
    _, loss, _ = ddp(**rank_data, sp_group=train_dist.get_sp_group(), **call_kwargs())
    loss.backward()
    grads = {n: p.grad for n, p in ddp.module.named_parameters() if p.grad is not None}
    return {"loss": loss.detach(), **grads}


def max_diffs(ours: dict, ref: dict) -> dict[str, float]:
    if set(ours) != set(ref):
        raise AssertionError(f"gradients of {sorted(set(ours) ^ set(ref))} differ")
    return {k: float((ours[k] - ref[k]).abs().max()) for k in ref}


def per_chunk_ids(original_ids, ttt_step, start, end):
    chunk = original_ids[:, start:end]
    if ttt_step == 0:
        return chunk
    return torch.cat([chunk[:, ttt_step:], chunk.new_zeros(1, ttt_step)], dim=-1)


def per_chunk_positions(seq_len, ttt_step, start, end):
    return end - start - ttt_step


def main(out: str) -> None:
    torch.set_default_dtype(torch.float64)
    # Three blocks of queries per attention call, as at long context.
    sp.QUERY_BLOCK = 16
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    rank = dist.get_rank()
    train_dist._init_sp_process_groups(rank, world, world)
    results: dict[str, dict[str, float]] = {}
    data = batch(seed=1)
    for attn_impl in ("eager", "sdpa"):
        model = tiny_draft(attn_impl)
        ref = one_process(model, data)
        results[attn_impl] = max_diffs(sequence_parallel(model, data, world), ref)
        if attn_impl == "eager":
            real = (sp.step_input_ids, sp.step_loss_positions)
            sp.step_input_ids = per_chunk_ids  # type: ignore[assignment]
            sp.step_loss_positions = per_chunk_positions  # type: ignore[assignment]
            try:
                wrong = sequence_parallel(model, data, world)
            finally:
                sp.step_input_ids, sp.step_loss_positions = real
            results["per_chunk_shift"] = max_diffs(wrong, ref)
    if world == 4:
        train_dist._init_sp_process_groups(rank, world, 2)
        model = tiny_draft("eager")
        refs = [one_process(model, batch(seed=10 + dp)) for dp in range(2)]
        mean = {k: (refs[0][k] + refs[1][k]) / 2 for k in refs[0]}
        dp_rank = train_dist.get_dp_rank()
        ours = sequence_parallel(model, batch(seed=10 + dp_rank), 2)
        # Gradients: the mean over the two batches; the loss: its group's batch's.
        diffs = max_diffs(ours, {**mean, "loss": refs[dp_rank]["loss"]})
        results["sp2_dp2"] = diffs
    if rank == 0:
        report = {"world_size": world, "cases": results}
        Path(out).write_text(json.dumps(report, indent=1) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
