# SPDX-License-Identifier: Apache-2.0
"""Ulysses sequence parallelism for EAGLE-3 training (``train --sp-size N``).

The ``N`` ranks of a sequence-parallel (SP) group train on one packed sequence of
``total_seq_len`` tokens together. The batch is split on the host
(:func:`split_batch`): rank ``r`` keeps its chunk ``[r * n, (r + 1) * n)`` of the
aux hidden states, the verifier's last hidden states of that chunk plus
``ttt_steps - 1`` halo rows of the next one (the targets of the later TTT steps),
and the input ids, loss mask, document ids and position ids whole.

Everything position-wise (``fc``, norms, MLP, heads) runs on the rank's chunk. In
attention, an all-to-all over heads (:func:`ulysses_attention`) gives each rank
the whole sequence for ``1 / N`` of the heads; the keys and values it gathered at
earlier TTT steps are kept, so each step sends only its own. Masks come from the
document ids by global position, for one block of queries at a time.

Teacher forcing and the loss use global positions: the input ids of TTT step
``t`` are the whole sequence's ids shifted by ``t``, sliced to the chunk, and a
position is in step ``t``'s loss when its global index plus ``t`` is inside the
sequence (as on one process), not when it is inside the chunk. The loss
numerator and its token count are summed over the group; the epsilon is added
once. The numerator is summed with ``torch.distributed.nn.functional.all_reduce``,
whose backward sums the ``N`` ranks' (equal) output gradients: each rank's
gradient is ``N`` times its share of the one-process gradient, so the average
over the world that DDP and FSDP take gives the update of one process.
"""

from __future__ import annotations

import sys
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_fn
from torch.utils.checkpoint import checkpoint
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, AttentionInterface

from speculators.losses import LossConfig, exp_loss_decay, kl_div_loss
from speculators.losses.utils import _LOSS_REDUCTION_EPS
from speculators.models.metrics import compute_accuracy_single_step

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from speculators.models.eagle3.core import Eagle3DraftModel

__all__ = [
    "SP_INNER_ATTN_IMPLS",
    "ULYSSES_ATTN_IMPL",
    "check_sp_size",
    "sp_forward",
    "sp_step_inputs",
    "split_batch",
    "step_input_ids",
    "step_loss_positions",
    "ulysses_attention",
]

#: Name the draft layers dispatch on while an SP forward runs.
ULYSSES_ATTN_IMPL = "ulysses"
#: Draft attention backends the Ulysses wrapper runs on each rank's heads.
SP_INNER_ATTN_IMPLS = ("eager", "sdpa")
#: Queries per attention call; a call's mask is ``block x kv_len`` booleans.
QUERY_BLOCK = 1024


def check_sp_size(
    sp_size: int,
    *,
    world_size: int,
    total_seq_len: int,
    ttt_steps: int,
    speculator_type: str = "eagle3",
    num_attention_heads: int | None = None,
    num_key_value_heads: int | None = None,
    attn_impl: str | None = None,
    draft_arch: str | None = None,
) -> None:
    """Refuse an ``--sp-size`` this run cannot use, in one line with the fix.

    The draft's heads and attention implementation are checked when given (the
    trainer checks the rest before it builds the draft).

    :raises ConfigError: naming ``--sp-size`` and what to change.
    """
    # Imported here: the CLI's configuration layer is not the model's.
    from speculators.train.config.resolution import ConfigError  # noqa: PLC0415

    if sp_size < 1:
        raise ConfigError(f"--sp-size must be at least 1, got {sp_size}.")
    if sp_size == 1:
        return
    checks = [
        (
            speculator_type == "eagle3",
            (
                f"trains only --speculator-type eagle3 (got '{speculator_type}'); "
                "drop --sp-size"
            ),
        ),
        (
            world_size % sp_size == 0,
            (
                f"must divide the world size {world_size}; launch a multiple of "
                f"{sp_size} processes with torchrun or lower --sp-size"
            ),
        ),
        (
            total_seq_len % sp_size == 0,
            f"must divide --total-seq-len {total_seq_len}; use a multiple of {sp_size}",
        ),
        (
            num_attention_heads is None
            or num_key_value_heads is None
            or (
                num_attention_heads % sp_size == 0
                and num_key_value_heads % sp_size == 0
            ),
            (
                f"must divide the draft's attention heads ({num_attention_heads}) "
                f"and key/value heads ({num_key_value_heads}); use a common divisor"
            ),
        ),
        (
            total_seq_len // sp_size >= ttt_steps - 1,
            (
                f"leaves chunks of {total_seq_len // sp_size} tokens, fewer than "
                f"--ttt-steps - 1 = {ttt_steps - 1}; lower --sp-size"
            ),
        ),
        (
            attn_impl is None or attn_impl in SP_INNER_ATTN_IMPLS,
            (
                f"runs with --draft-attn-impl {' or '.join(SP_INNER_ATTN_IMPLS)} "
                f"(got '{attn_impl}'); pass one of them"
            ),
        ),
        (
            draft_arch != "deepseek_v3",
            (
                "does not train the MLA draft (--draft-arch deepseek_v3) yet; drop "
                "--sp-size or use --draft-arch llama"
            ),
        ),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(f"--sp-size {sp_size} {message}.")


def chunk_bounds(seq_len: int, sp_rank: int, sp_size: int) -> tuple[int, int]:
    """The global ``[start, end)`` of rank ``sp_rank``'s chunk."""
    chunk = seq_len // sp_size
    return sp_rank * chunk, (sp_rank + 1) * chunk


def split_batch(
    batch: Mapping[str, Any], sp_rank: int, sp_size: int, ttt_steps: int
) -> dict[str, Any]:
    """Rank ``sp_rank``'s part of a packed ``[1, total_seq_len]`` batch.

    The aux hidden states are cut to the rank's chunk and the verifier's last
    hidden states to the chunk plus ``ttt_steps - 1`` rows of the next one (fewer
    on the last rank); every other entry is kept whole.
    """
    seq_len = batch["input_ids"].shape[1]
    if seq_len % sp_size:
        raise ValueError(
            f"--sp-size {sp_size} must divide the batch's {seq_len} positions; "
            "use a --total-seq-len that is a multiple of it."
        )
    start, end = chunk_bounds(seq_len, sp_rank, sp_size)
    out = dict(batch)
    out["hidden_states"] = batch["hidden_states"][:, start:end]
    verifier = batch.get("verifier_last_hidden_states")
    if verifier is not None:
        halo_end = min(seq_len, end + ttt_steps - 1)
        out["verifier_last_hidden_states"] = verifier[:, start:halo_end]
    return out


def sp_step_inputs(
    batch: Mapping[str, Any], call_kwargs: Mapping[str, Any] | None
) -> tuple[Mapping[str, Any], dict[str, Any]]:
    """The batch and model call kwargs of one training step on this rank.

    Without sequence parallelism (``sp_size == 1``) both are returned as given;
    with it, the batch is this rank's part (:func:`split_batch`) and the kwargs
    carry the SP group.
    """
    # Imported here: the trainer's topology is not the model's concern.
    from speculators.train import distributed  # noqa: PLC0415

    kwargs = dict(call_kwargs or {})
    sp_size = distributed.get_sp_size()
    if sp_size == 1:
        return batch, kwargs
    batch = split_batch(
        batch, distributed.get_sp_rank(), sp_size, int(kwargs.get("ttt_steps", 1))
    )
    kwargs["sp_group"] = distributed.get_sp_group()
    return batch, kwargs


def step_input_ids(
    original_ids: torch.Tensor, ttt_step: int, start: int, end: int
) -> torch.Tensor:
    """Teacher-forced input ids of TTT step ``ttt_step`` for ``[start, end)``.

    The whole sequence is shifted left by ``ttt_step`` (zeros past its end), as
    on one process, and then sliced: a chunk's last positions read the next
    chunk's ids.
    """
    if ttt_step == 0:
        return original_ids[:, start:end]
    shifted = torch.cat(
        [original_ids[:, ttt_step:], original_ids.new_zeros(1, ttt_step)], dim=-1
    )
    return shifted[:, start:end]


def step_loss_positions(seq_len: int, ttt_step: int, start: int, end: int) -> int:
    """How many of the chunk's first positions are in step ``ttt_step``'s loss.

    Position ``p`` predicts the target at ``p + ttt_step``, which exists while it
    is inside the sequence (not the chunk).
    """
    return max(0, min(end, seq_len - ttt_step) - start)


@contextmanager
def _autograd_collectives() -> Iterator[None]:
    # torch 2.13 marks torch.distributed.nn.functional deprecated in favour of
    # the functional collectives, whose autograd variants are private; these are
    # the public collectives with a backward.
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message=r"torch\.distributed\.nn\.functional",
            category=FutureWarning,
        )
        yield


@dataclass
class _UlyssesState:
    group: dist.ProcessGroup
    size: int
    document_ids: torch.Tensor  # [seq_len], -1 for padding
    seq_len: int
    inner: str
    # Layers with sliding-window attention, and the window.
    sliding_layers: frozenset[int] = frozenset()
    sliding_window: int | None = None
    # Per layer: the keys and values gathered at each TTT step so far,
    # [1, kv_heads / size, seq_len, head_dim] each.
    keys: dict[int, list[torch.Tensor]] = field(default_factory=dict)
    values: dict[int, list[torch.Tensor]] = field(default_factory=dict)


_STATE: _UlyssesState | None = None


def _heads_to_sequence(x: torch.Tensor, state: _UlyssesState) -> torch.Tensor:
    """``[B, H, n, d]`` (chunk, all heads) -> ``[B, H / P, N, d]`` (all, some)."""
    b, h, n, d = x.shape
    p = state.size
    send = x.reshape(b, p, h // p, n, d).transpose(0, 1).contiguous()
    with _autograd_collectives():
        recv = dist_fn.all_to_all_single(
            torch.empty_like(send), send, group=state.group
        )
    # recv[j] is rank j's chunk of our heads.
    return recv.permute(1, 2, 0, 3, 4).reshape(b, h // p, p * n, d)


def _sequence_to_heads(x: torch.Tensor, state: _UlyssesState) -> torch.Tensor:
    """``[B, N, H / P, d]`` (all, some heads) -> ``[B, n, H, d]`` (chunk, all)."""
    b, seq, hp, d = x.shape
    p = state.size
    n = seq // p
    send = x.reshape(b, p, n, hp, d).transpose(0, 1).contiguous()
    with _autograd_collectives():
        recv = dist_fn.all_to_all_single(
            torch.empty_like(send), send, group=state.group
        )
    # recv[j] is our chunk of rank j's heads.
    return recv.permute(1, 2, 0, 3, 4).reshape(b, n, p * hp, d)


def _block_mask(
    document_ids: torch.Tensor,
    q_start: int,
    q_end: int,
    kv_len: int,
    sliding_window: int | None = None,
) -> torch.Tensor:
    """Boolean ``[q_end - q_start, kv_len]`` mask of upstream's draft attention.

    Causal within a document (padding queries see no document), plus each query's
    own position at every TTT step (``kv % seq_len == q``), within
    ``sliding_window`` when given; built from the document ids only, one block of
    queries at a time.
    """
    seq_len = document_ids.shape[0]
    q = torch.arange(q_start, q_end, device=document_ids.device).unsqueeze(1)
    kv = torch.arange(kv_len, device=document_ids.device).unsqueeze(0)
    doc_q = document_ids[q]
    same_doc = (doc_q != -1) & (doc_q == document_ids[kv % seq_len])
    causal = q >= kv
    if sliding_window is not None:
        causal = causal & (kv > q - sliding_window)
    return (causal & same_doc) | (kv % seq_len == q)


def _inner_function(module: torch.nn.Module, inner: str) -> Callable[..., Any]:
    # Transformers' eager attention lives in each model's own module.
    default = sys.modules[type(module).__module__].eager_attention_forward
    return ALL_ATTENTION_FUNCTIONS.get_interface(inner, default)


def _attend_block(  # noqa: PLR0917 -- checkpoint passes the tensors by position
    fn: Callable[..., Any],
    module: torch.nn.Module,
    state: _UlyssesState,
    bounds: tuple[int, int],
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    **kwargs,
) -> torch.Tensor:
    """The inner attention of queries ``bounds`` over every key gathered so far."""
    layer = int(getattr(module, "layer_idx", 0))
    window = state.sliding_window if layer in state.sliding_layers else None
    mask = _block_mask(state.document_ids, *bounds, key.shape[2], window)
    if state.inner == "eager":
        additive = torch.zeros(mask.shape, dtype=query.dtype, device=query.device)
        mask = additive.masked_fill_(~mask, float("-inf"))
    out, _ = fn(module, query, key, value, mask[None, None], **kwargs)
    return out


def ulysses_attention(  # noqa: PLR0917 -- transformers' attention interface
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Any,  # noqa: ARG001 -- built here from the document ids
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Draft attention of one TTT step over the SP group (all-to-all over heads).

    ``query`` / ``key`` / ``value`` hold this rank's chunk for every head and
    this step only; the result is this rank's chunk, ``[B, n, H, d]``.
    """
    state = _STATE
    if state is None:
        raise RuntimeError("ulysses attention called outside an SP forward")
    layer = int(getattr(module, "layer_idx", 0))
    q = _heads_to_sequence(query, state)
    keys = state.keys.setdefault(layer, [])
    values = state.values.setdefault(layer, [])
    keys.append(_heads_to_sequence(key, state))
    values.append(_heads_to_sequence(value, state))
    k = torch.cat(keys, dim=2)
    v = torch.cat(values, dim=2)
    fn = _inner_function(module, state.inner)
    outputs = []
    for q_start in range(0, state.seq_len, QUERY_BLOCK):
        q_end = min(state.seq_len, q_start + QUERY_BLOCK)

        def block(
            query: torch.Tensor,
            key: torch.Tensor,
            value: torch.Tensor,
            bounds: tuple[int, int] = (q_start, q_end),
        ) -> torch.Tensor:
            return _attend_block(
                fn,
                module,
                state,
                bounds,
                query,
                key,
                value,
                scaling=scaling,
                dropout=dropout,
                **kwargs,
            )

        q_block = q[:, :, q_start:q_end]
        if torch.is_grad_enabled():
            # Recomputed in the backward: neither the block's mask nor its
            # attention weights stay alive between the passes.
            out = checkpoint(block, q_block, k, v, use_reentrant=False)
        else:
            out = block(q_block, k, v)
        outputs.append(out)
    # [B, N, H / P, d] -> this rank's chunk of every head
    return _sequence_to_heads(torch.cat(outputs, dim=1), state), None


AttentionInterface.register(ULYSSES_ATTN_IMPL, ulysses_attention)


@contextmanager
def _ulysses_layers(model: Eagle3DraftModel, state: _UlyssesState) -> Iterator[None]:
    """Route the draft layers' attention through :func:`ulysses_attention`."""
    global _STATE  # noqa: PLW0603
    configs: dict[int, Any] = {
        id(m.config): m.config for m in model.modules() if hasattr(m, "config")
    }
    configs.pop(id(model.config), None)
    saved = {key: cfg._attn_implementation for key, cfg in configs.items()}  # noqa: SLF001
    _STATE = state
    try:
        for cfg in configs.values():
            cfg._attn_implementation = ULYSSES_ATTN_IMPL  # noqa: SLF001
        yield
    finally:
        for key, cfg in configs.items():
            cfg._attn_implementation = saved[key]  # noqa: SLF001
        _STATE = None


def _loss_numerator(
    logits: torch.Tensor,
    targets: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    ttt_step: int,
    ttt_step_loss_decay: float,
    loss_config: LossConfig,
) -> torch.Tensor:
    """Upstream's ``compound_loss`` before its division by the token count."""
    decay = partial(exp_loss_decay, gamma=ttt_step_loss_decay)
    total = torch.zeros((), device=logits.device, dtype=torch.float32)
    for fn, weight in loss_config.values():
        elementwise = fn(logits, targets) * loss_mask.to(logits.dtype)
        pos_idx = torch.full_like(elementwise, ttt_step)
        elementwise = elementwise * decay(pos_idx, elementwise_loss=elementwise)
        total = total + weight * elementwise.sum()
    return total


def _step_loss(
    logits: torch.Tensor,  # [1, n, draft_vocab]
    targets: torch.Tensor,  # [1, n + halo, draft_vocab]
    full_mask: torch.Tensor,  # [1, total_seq_len]
    prev_correct: torch.Tensor,  # [1, n], updated in place
    metrics: dict[str, torch.Tensor],  # updated in place
    *,
    ttt_step: int,
    chunk: tuple[int, int],
    ttt_step_loss_decay: float,
    loss_config: LossConfig,
    sp_group: dist.ProcessGroup,
) -> torch.Tensor:
    """Step ``ttt_step``'s loss over the whole sequence, and this rank's metrics."""
    start, end = chunk
    m = step_loss_positions(full_mask.shape[1], ttt_step, start, end)
    s_logits = logits[:, :m]
    s_targets = targets[:, ttt_step : ttt_step + m]
    s_mask = full_mask[:, start + ttt_step : start + ttt_step + m]
    numerator = _loss_numerator(
        s_logits,
        s_targets,
        s_mask,
        ttt_step=ttt_step,
        ttt_step_loss_decay=ttt_step_loss_decay,
        loss_config=loss_config,
    )
    count = s_mask.sum().to(numerator.dtype)
    with _autograd_collectives():
        numerator = dist_fn.all_reduce(numerator, group=sp_group)
    dist.all_reduce(count, group=sp_group)
    # The epsilon once, as on one process.
    s_loss = numerator / (count + _LOSS_REDUCTION_EPS)
    full, full_total, cond, cond_total = compute_accuracy_single_step(
        torch.argmax(s_logits, dim=-1),
        torch.argmax(s_targets, dim=-1),
        s_mask,
        prev_correct[:, :m],
    )
    metrics[f"loss_{ttt_step}_sum"] = s_loss.detach().clone()
    metrics[f"loss_{ttt_step}_total"] = torch.ones((), device=logits.device)
    metrics[f"full_acc_{ttt_step}_sum"] = full
    metrics[f"full_acc_{ttt_step}_total"] = full_total
    metrics[f"cond_acc_{ttt_step}_sum"] = cond
    metrics[f"cond_acc_{ttt_step}_total"] = cond_total
    return s_loss


# On accelerators upstream compiles Eagle3DraftModel.forward; the SP step (its
# collectives, the layers' rerouted attention) runs eagerly inside it.
@torch.compiler.disable
def sp_forward(  # noqa: C901
    model: Eagle3DraftModel,
    *,
    hidden_states: torch.Tensor,  # [1, n, num_aux * hidden]: this rank's chunk
    input_ids: torch.Tensor,  # [1, total_seq_len]
    document_ids: torch.Tensor,  # [1, total_seq_len]
    loss_mask: torch.Tensor | None,  # [1, total_seq_len]
    position_ids: torch.Tensor | None,  # [1, total_seq_len]
    verifier_last_hidden_states: torch.Tensor | None,  # [1, n + halo, hidden]
    ttt_steps: int,
    ttt_step_loss_decay: float,
    loss_config: LossConfig | None,
    sp_group: dist.ProcessGroup,
    **kwargs,
):
    """:meth:`Eagle3DraftModel.forward` of one SP rank (see the module's doc)."""
    device = hidden_states.device
    size = dist.get_world_size(sp_group)
    rank = dist.get_rank(sp_group)
    seq_len = input_ids.shape[1]
    start, end = chunk_bounds(seq_len, rank, size)
    if hidden_states.shape[1] != end - start:
        raise ValueError(
            f"SP rank {rank} got {hidden_states.shape[1]} hidden-state rows for a "
            f"{end - start}-token chunk; split the batch with split_batch."
        )
    if loss_config is None:
        loss_config = {"kl_div": (kl_div_loss, 1.0)}
    if position_ids is None:
        position_ids = 1 + torch.arange(seq_len, device=device).unsqueeze(0)
    position_ids = position_ids[:, start:end]
    state = _UlyssesState(
        group=sp_group,
        size=size,
        document_ids=document_ids.squeeze(0).to(device),
        seq_len=seq_len,
        inner=model._attn_impl,  # noqa: SLF001
        sliding_layers=frozenset(model.sliding_window_indices),
        sliding_window=model.sliding_window,
    )

    if model.input_norm is not None:
        hidden_states = model.input_norm(hidden_states)
    if model.fc_norm is not None:
        chunks = hidden_states.chunk(len(model.fc_norm), dim=-1)
        hidden_states = torch.cat(
            [norm(c) for norm, c in zip(model.fc_norm, chunks, strict=True)], dim=-1
        )
    hidden_states = model.fc(hidden_states)

    return_loss = verifier_last_hidden_states is not None
    full_mask = (
        loss_mask.bool()
        if loss_mask is not None
        else torch.ones(1, seq_len, device=device, dtype=torch.bool)
    )
    if return_loss:
        with torch.no_grad():
            targets = model.verifier_lm_head(
                model.verifier_norm(verifier_last_hidden_states)
            )
        loss = torch.zeros((), device=device)
        prev_correct = full_mask[:, start:end].clone()
        metrics: dict[str, torch.Tensor] = {}

    draft_tokens = []
    with _ulysses_layers(model, state):
        for ttt_step in range(ttt_steps):
            ids = step_input_ids(input_ids, ttt_step, start, end)
            with torch.no_grad():
                input_embeds = model.embed_tokens(ids)
            hidden_states = torch.cat([input_embeds, hidden_states], dim=-1)
            position_embeddings = model.rotary_emb(hidden_states, position_ids)
            for decoder_layer in model.layers:
                hidden_states = decoder_layer(
                    hidden_states,
                    attention_mask=None,
                    position_ids=position_ids,
                    past_key_values=None,
                    position_embeddings=position_embeddings,
                    **kwargs,
                )
            if model.config.norm_output:
                hidden_states = model.norm(hidden_states)
                logits = model.lm_head(hidden_states)
            else:
                logits = model.lm_head(model.norm(hidden_states))

            if return_loss:
                s_loss = _step_loss(
                    logits,
                    targets,
                    full_mask,
                    prev_correct,
                    metrics,
                    ttt_step=ttt_step,
                    chunk=(start, end),
                    ttt_step_loss_decay=ttt_step_loss_decay,
                    loss_config=loss_config,
                    sp_group=sp_group,
                )
                loss = loss + s_loss
            draft_tokens.append(torch.argmax(logits, dim=-1).detach())
            position_ids = position_ids + 1

    if return_loss:
        metrics["loss_sum"] = loss.detach().clone()
        metrics["loss_total"] = torch.ones((), device=device)
        return draft_tokens, loss, metrics
    return draft_tokens
