"""A DFlash, DFlash2, DSpark or XPress draft proposing one block per round, as
vLLM 0.34 runs it.

Training (upstream's ``_backbone_forward``) picks an anchor position ``p`` and
runs a block of ``block_size`` query slots, ``[x[p], mask, mask, ...]`` at
positions ``p, p+1, ...``, over a context of the verifier's aux states at every
position before ``p`` (``fc`` then ``hidden_norm``, projected to K/V by each
layer). Decoding is the same forward with ``p`` the newest committed token (the
verifier's bonus token, whose aux state does not exist yet):

* ``sample_from_anchor`` (DSpark's default): slot ``i`` proposes token
  ``p + i + 1``, so a block of ``k`` slots proposes ``k`` tokens;
* otherwise (DFlash's default) slot 0 is the anchor and slot ``i`` proposes
  token ``p + i``: ``k + 1`` slots for ``k`` tokens.

Each proposal is the argmax of the slot's logits (greedy) or a sample of their
softmax; DSpark adds its Markov bias from the token before the proposed one (the
anchor, then the previous proposal), computed by the draft's own head exactly as
training computes it for those tokens; DFlash2 walks its candidates: the slot's
top-K, rescored by its selector from the token before. XPress drafts the whole
block greedily with its refiner's Jacobi passes (:mod:`.jacobi`); vLLM keeps no
draft distribution for it, so a sampled round verifies each token as a draft
of all its mass on that token (rejection sampling then accepts it with the
verifier's ``p(x)``). The context's K/V are cached across rounds (they depend
only on the aux states); the block's are dropped after each round.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from transformers import DynamicCache

from ..served import xpress_topc
from .jacobi import jacobi_block
from .vocab import DraftVocabulary

if TYPE_CHECKING:
    from .decode import DraftRequest, Proposal

__all__ = ["BlockDraftRunner", "block_tokens"]

#: Attention used for decoding: exact, any device.
DECODE_ATTENTION = "sdpa"


def block_tokens(block_size: int, sample_from_anchor: bool) -> int:
    """The most tokens one block proposes: every slot when slot 0 samples from
    the anchor, else every slot but the anchor's."""
    return block_size - (0 if sample_from_anchor else 1)


class BlockDraftRunner:
    """Block proposals of a DFlash-family draft (one sequence at a time).

    :param model: the trained draft (``SpeculatorModel.from_pretrained``): a
        ``DFlashDraftModel``, ``DFlash2DraftModel`` or ``DSparkDraftModel``.
    :param device: where the draft runs (the verifier's input device).
    """

    def __init__(self, model: Any, device: torch.device | str) -> None:
        self.model = model.to(device).eval()
        self.device = torch.device(device)
        config = model.config
        config.transformer_layer_config._attn_implementation = DECODE_ATTENTION
        self.block_size = int(config.block_size)
        self.sample_from_anchor = bool(config.sample_from_anchor)
        self.mask_token_id = int(model.mask_token_id)
        #: the most tokens one block proposes
        self.max_tokens = block_tokens(self.block_size, self.sample_from_anchor)
        self.markov_head = getattr(model, "markov_head", None)  # DSpark
        self.candidate_selector = getattr(model, "candidate_selector", None)  # DFlash2
        self.refiner = getattr(model, "refiner_head", None)  # XPress
        self.jacobi_passes = int(getattr(config, "num_jacobi_passes", 0))
        self.cache = DynamicCache()
        self.dtype = next(model.fc.parameters()).dtype
        self.vocab = DraftVocabulary(model, self.device)

    @property
    def length(self) -> int:
        """Context positions whose K/V are cached."""
        return int(self.cache.get_seq_length())

    def reset(self) -> None:
        """Forget every entry (a new prompt)."""
        self.cache = DynamicCache()

    def crop(self, length: int) -> None:
        """Keep the first ``length`` context positions."""
        if self.length > length:
            self.cache.crop(length - self.length)

    def _mask(self, layer: int, anchor: int, slots: int) -> torch.Tensor:
        """``[1, 1, slots, anchor + slots]``: the block sees the context before
        the anchor (the sliding window measured from the anchor, as training
        measures it) and itself, causally only on sliding layers trained so."""
        m = self.model
        ctx = torch.arange(anchor, device=self.device)
        sees_ctx = torch.ones(slots, anchor, dtype=torch.bool, device=self.device)
        sees_block = torch.ones(slots, slots, dtype=torch.bool, device=self.device)
        if layer in m.sliding_window_indices:
            sees_ctx &= (ctx >= anchor - m.sliding_window)[None, :]
            if not m.sliding_window_non_causal:
                sees_block = torch.tril(sees_block)
        return torch.cat([sees_ctx, sees_block], dim=1)[None, None]

    @torch.no_grad()
    def block_hidden(
        self, anchor_token: int, context_states: torch.Tensor, slots: int
    ) -> torch.Tensor:
        """The block's final hidden states ``[slots, hidden]``.

        :param context_states: aux states ``[n, n_aux * hidden]`` of the context
            positions not yet cached (``length .. length + n - 1``); the anchor
            sits right after them.
        """
        m = self.model
        start, n = self.length, context_states.shape[0]
        anchor = start + n
        ids = torch.full((1, slots), self.mask_token_id, device=self.device)
        ids[0, 0] = anchor_token
        noise = m.embed_tokens(ids)
        target = m.hidden_norm(m.fc(context_states.to(self.device, self.dtype)))[None]
        positions = torch.arange(start, anchor + slots, device=self.device)[None]
        rope = m.rotary_emb(noise, positions)
        for i, layer in enumerate(m.layers):
            noise = layer(
                hidden_states=noise,
                target_hidden=target,
                attention_mask=self._mask(i, anchor, slots),
                position_ids=positions,
                past_key_value=self.cache,
                use_cache=True,
                position_embeddings=rope,
            )
        self.crop(anchor)  # the block's K/V leave; the context's stay
        return m.norm(noise)[0]

    def _markov_bias(
        self, hidden: torch.Tensor, block_tokens: list[int], slot: int
    ) -> torch.Tensor:
        """DSpark's bias on ``slot``'s logits, with the block's tokens known so
        far, as training computes it from the block's tokens."""
        assert self.markov_head is not None
        # Slot k reads token k (sampling from the anchor) or k - 1 (the anchor
        # for slot 0): slot + 1 tokens either way, the known ones.
        known = block_tokens[: slot + 1]
        if not self.sample_from_anchor:
            known = [block_tokens[0], *block_tokens[:slot]]
        tokens = torch.tensor(known, device=self.device)
        bias = self.markov_head.block_bias(
            prev_token_ids=tokens[None], hidden_states=hidden[None, : slot + 1]
        )
        return bias[0, slot].float()

    def _selected(
        self, row: torch.Tensor, hidden: torch.Tensor, previous: int
    ) -> torch.Tensor:
        """DFlash2's step of the candidate walk: the slot's unary top-K, scored
        with the selector's transition from the token before (the anchor, then
        the previous pick); every other token out (-inf), as vLLM's walk and
        its cached draft logits have it."""
        selector = self.candidate_selector
        assert selector is not None
        candidates = row.topk(selector.top_k).indices
        previous_id = torch.tensor(previous, device=self.device)
        transition = selector.transition_scores(hidden, previous_id, candidates)
        out = torch.full_like(row, float("-inf"))
        out[candidates] = row[candidates] + transition.float()
        return out

    def _jacobi(
        self, request: DraftRequest, hidden: torch.Tensor, logits: torch.Tensor
    ) -> Proposal:
        """XPress's block (:func:`.jacobi.jacobi_block`), with vLLM's top-C;
        when sampling, each token's draft distribution all its mass."""
        ids = jacobi_block(
            self.refiner,
            logits,
            hidden,
            request.context[-1],
            passes=self.jacobi_passes,
            topc=xpress_topc(logits.shape[-1]),
        )
        proposed = [int(self.vocab.draft_to_target[i]) for i in ids]
        if request.temperature <= 0:
            return proposed, [None] * len(proposed)
        one_hot = logits.new_zeros(len(ids), logits.shape[-1])
        rows = torch.arange(len(ids), device=logits.device)
        one_hot[rows, torch.tensor(ids, device=logits.device)] = 1.0
        return proposed, list(self.vocab.target_probs(one_hot))

    @torch.no_grad()
    def propose(self, request: DraftRequest) -> Proposal:
        """``request.k`` draft tokens (target ids) after its context, in one
        block anchored on the last context token (whose aux state does not
        exist yet), and, when sampling, their target-vocabulary distributions."""
        k = request.k
        if k > self.max_tokens:
            raise ValueError(
                f"a block of {self.block_size} proposes at most {self.max_tokens} "
                f"tokens (sample_from_anchor={self.sample_from_anchor}); "
                f"--num-speculative-tokens {k} asks for more"
            )
        if self.refiner is not None and k != self.max_tokens:
            raise ValueError(
                f"vLLM drafts an XPress block whole: --num-speculative-tokens "
                f"{self.max_tokens} (block {self.block_size}), not {k}"
            )
        self.crop(request.committed)
        first = 0 if self.sample_from_anchor else 1
        hidden = self.block_hidden(request.context[-1], request.aux, first + k)
        logits = self.model.lm_head(hidden).float()
        if self.refiner is not None:
            return self._jacobi(request, hidden, logits)
        block_tokens = [request.context[-1]]
        proposed: list[int] = []
        dists: list[torch.Tensor | None] = []
        for slot in range(first, first + k):
            row = logits[slot]
            if self.markov_head is not None:
                row = row + self._markov_bias(hidden, block_tokens, slot)
            if self.candidate_selector is not None:
                row = self._selected(row, hidden[slot], block_tokens[-1])
            token, q = self.vocab.choose(row, request.temperature, request.gen)
            proposed.append(token)
            dists.append(q)
            block_tokens.append(token)
        return proposed, dists
