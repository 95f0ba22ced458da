"""A random-weight EAGLE-3 draft built straight from a decoder layer config.

For what needs a draft model without a verifier checkpoint on disk: the kernel
tests and the draft benchmarks. Verifier-owned weights (embedding, heads) start
as NaN in upstream's draft until loaded; here they are drawn instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from speculators.models.eagle3 import Eagle3DraftModel
    from transformers import PretrainedConfig


def build_eagle3_draft(
    layer_config: PretrainedConfig,
    *,
    draft_vocab_size: int,
    ttt_steps: int,
    verifier_architecture: str,
    std: float,
    device: torch.device | str = "cpu",
) -> Eagle3DraftModel:
    """The draft for ``layer_config`` (seeded), its verifier-owned weights drawn
    from N(0, ``std``), built on ``device``; aux layers 1, 2, 3."""
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig

    torch.manual_seed(0)
    config = Eagle3SpeculatorConfig(
        transformer_layer_config=layer_config,
        draft_vocab_size=draft_vocab_size,
        norm_before_residual=False,
        eagle_aux_hidden_state_layer_ids=[1, 2, 3],
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=ttt_steps)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(
                name_or_path=None, architectures=[verifier_architecture]
            ),
        ),
    )
    with torch.device(device):
        model = Eagle3DraftModel(config)
    for name, buf in model.named_buffers():
        if buf.is_floating_point() and torch.isnan(buf).any():
            raise RuntimeError(f"buffer {name} is NaN")
    for weight in (
        model.embed_tokens.weight,
        model.lm_head.weight,
        model.verifier_lm_head.weight,
    ):
        torch.nn.init.normal_(weight, std=std)
    return model
