"""An EAGLE-3 draft run step by step over its own KV cache, as vLLM runs it.

Training runs the draft's TTT steps over whole sequences; decoding runs the same
modules incrementally. Entry ``j`` of the draft's cache is the pair (token
``x[j+1]``, verifier aux state ``g[j]``) at position ``j + 1`` (training's
``shift_batch``); a chained step feeds the draft's own token and its own output
state, and attends to every earlier entry, which is exactly the TTT mask
(committed entries, earlier chained steps, itself).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import torch
from transformers import DynamicCache

from .vocab import DraftVocabulary

if TYPE_CHECKING:
    from speculators.models.eagle3 import Eagle3DraftModel

    from .decode import DraftRequest, Proposal

__all__ = ["DraftRunner", "untrained_copy"]

#: Attention used for decoding: exact, any device, any q/k/v head dims.
DECODE_ATTENTION = "sdpa"


class DraftRunner:
    """Incremental EAGLE-3 draft steps (one sequence at a time).

    :param model: the trained draft (``SpeculatorModel.from_pretrained``).
    :param device: where the draft runs (the verifier's input device).
    """

    def __init__(self, model: Eagle3DraftModel, device: torch.device | str) -> None:
        self.model = model.to(device).eval()
        self.device = torch.device(device)
        tl_config = model.config.transformer_layer_config
        tl_config._attn_implementation = DECODE_ATTENTION
        self.cache = DynamicCache()
        self.positions = torch.empty(0, dtype=torch.long, device=self.device)
        self.dtype = next(model.fc.parameters()).dtype
        self.vocab = DraftVocabulary(model, self.device)
        self.draft_to_target = self.vocab.draft_to_target

    @property
    def length(self) -> int:
        """Entries in the draft's KV cache."""
        return int(self.cache.get_seq_length())

    def reset(self) -> None:
        """Forget every entry (a new prompt)."""
        self.cache = DynamicCache()
        self.positions = self.positions[:0]

    def crop(self, length: int) -> None:
        """Keep the first ``length`` entries (those built from verifier states)."""
        if self.length > length:
            self.cache.crop(length - self.length)
            self.positions = self.positions[:length]

    def _masks(self, start: int, positions: torch.Tensor) -> list[torch.Tensor]:
        """Per layer: new entry ``start + i`` sees every entry up to itself (within
        the layer's sliding window, by position, for sliding-attention layers).
        ``self.positions`` already holds the new entries' positions."""
        m = self.model
        n = positions.shape[0]
        keys = torch.arange(start + n, device=self.device)
        full = keys[None, :] <= (start + torch.arange(n, device=self.device))[:, None]
        masks = [full[None, None]] * len(m.layers)
        if m.uses_sliding_window_attn:
            near = positions[:, None] - self.positions[None, :] < m.sliding_window
            for i in m.sliding_window_indices:
                masks[i] = (full & near)[None, None]
        return masks

    @torch.no_grad()
    def project(self, aux: torch.Tensor) -> torch.Tensor:
        """The draft's input state from verifier aux states ``[n, n_aux * hidden]``."""
        m = self.model
        hs = aux.to(self.device, self.dtype)
        if m.input_norm is not None:
            hs = m.input_norm(hs)
        if m.fc_norm is not None:
            chunks = hs.chunk(len(m.fc_norm), dim=-1)
            hs = torch.cat([n(c) for n, c in zip(m.fc_norm, chunks, strict=True)], -1)
        return m.fc(hs)

    @torch.no_grad()
    def propose(self, request: DraftRequest) -> Proposal:
        """``request.k`` chained draft tokens (target ids) and, when sampling,
        their target-vocabulary distributions ``q``. New cache entries are the
        pairs (``context[j + 1]``, ``aux[j - committed]``) for ``j >= committed``."""
        k, first_position = request.k, request.committed + 1
        tokens = torch.tensor(request.context[first_position:], device=self.device)
        states = self.project(request.aux)
        out_states, logits = self.step(tokens, states, first_position)
        state, last = out_states[-1:], logits[-1]
        proposed: list[int] = []
        dists: list[torch.Tensor | None] = []
        position = first_position + tokens.shape[0]
        for i in range(k):
            token, q = self.vocab.choose(last, request.temperature, request.gen)
            proposed.append(token)
            dists.append(q)
            if i + 1 < k:
                ids = torch.tensor([token], device=self.device)
                state, logit_seq = self.step(ids, state, position)
                last = logit_seq[-1]
                position += 1
        return proposed, dists

    @torch.no_grad()
    def step(
        self, token_ids: torch.Tensor, states: torch.Tensor, first_position: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``n`` entries: target-vocabulary tokens ``[n]`` with input states
        ``[n, hidden]`` at positions ``first_position ...``.

        :returns: the output states ``[n, hidden]`` (fed to a chained step) and
            float32 draft-vocabulary logits ``[n, draft_vocab]``.
        """
        m = self.model
        n = token_ids.shape[0]
        start = self.length
        embeds = m.embed_tokens(token_ids.to(self.device))
        hs = torch.cat([embeds, states.to(self.dtype)], dim=-1)[None]
        positions = torch.arange(
            first_position, first_position + n, device=self.device
        )[None]
        cache_position = torch.arange(start, start + n, device=self.device)
        self.positions = torch.cat([self.positions, positions[0]])
        masks = self._masks(start, positions[0])
        rope = m.rotary_emb(hs, positions)
        for layer, mask in zip(m.layers, masks, strict=True):
            hs = layer(
                hs,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=self.cache,
                cache_position=cache_position,
                position_embeddings=rope,
            )
        if m.config.norm_output:
            hs = m.norm(hs)
            logits = m.lm_head(hs)
        else:
            logits = m.lm_head(m.norm(hs))
        return hs[0], logits[0].float()


def untrained_copy(model: Eagle3DraftModel, seed: int = 0) -> Eagle3DraftModel:
    """The same draft before training: fresh initialization of what the trainer
    trains; the frozen verifier-owned tensors kept as training starts from them
    (embedding, output head rows, vocabulary maps, verifier head and norm). The
    baseline that shows what training bought."""
    torch.manual_seed(seed)
    fresh = type(model)(copy.deepcopy(model.config))
    kept = {
        name: tensor
        for name, tensor in model.state_dict().items()
        if name.startswith(("embed_tokens.", "lm_head.", "verifier_"))
        or name in ("d2t", "t2d")
    }
    fresh.load_state_dict(kept, strict=False)
    fresh.embed_tokens.weight.requires_grad_(model.embed_tokens.weight.requires_grad)
    return fresh.to(next(model.parameters()).dtype)
