"""The verifier zoo: tiny real checkpoints with the truth of what training must use.

The checkpoints come from :mod:`speculators_kimi.tiny_verifier` (one builder per
family, written the way the family ships on the Hub); a :class:`Member` adds
what the tests compare against: the embedding, output head and final norm module
that the instantiated verifier itself uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from speculators_kimi import tiny_verifier as tiny

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["BUILDERS", "HYBRIDS", "Member", "kimi_k25_sharded", "member"]


@dataclass
class Member:
    """A written verifier and the tensors / final norm its text model uses."""

    path: Path
    embed: torch.Tensor
    head: torch.Tensor
    norm: torch.nn.Module
    train_args: list[str] = field(default_factory=list)
    # Written if (and only if) code shipped in the checkpoint was imported.
    marker: Path | None = None
    # The instantiated verifier (text path) with its output head, for logits.
    model: torch.nn.Module | None = None


def member(path: Path, model: Any, norm: torch.nn.Module, **kw: Any) -> Member:
    """The truth of ``model``: its own input embedding, output head and ``norm``."""
    embed = model.get_input_embeddings().weight.detach().clone()
    head = model.get_output_embeddings().weight.detach().clone()
    return Member(path, embed, head, norm, model=model, **kw)


def _of(build: Callable[[Path], tiny.TinyCheckpoint]) -> Callable[[Path], Member]:
    def make(out: Path) -> Member:
        built = build(out)
        return member(built.path, built.model, built.norm, marker=built.marker)

    return make


def _kimi(
    seed: int, *, sharded: bool = False, remote: bool = False
) -> Callable[[Path], tiny.TinyCheckpoint]:
    """Kimi-K2.5 with its final norm perturbed, sharded or remote-code as asked."""
    spec = tiny.KimiTinySpec(seed=seed)
    return lambda out: tiny.kimi_k25(
        out, spec, perturb=True, sharded=sharded, remote=remote
    )


#: Kimi-K2.5 in 4 shards: embedding first, head and final norm last.
kimi_k25_sharded = _of(_kimi(31, sharded=True))

BUILDERS: dict[str, Callable[[Path], Member]] = {
    "deepseek-v3-mtp": _of(tiny.deepseek_v3_mtp),
    "deepseek-v3-per-expert": _of(
        lambda out: tiny.deepseek_v3_mtp(out, per_expert=True)
    ),
    "gpt-neox": _of(tiny.gpt_neox),
    "falcon": _of(tiny.falcon),
    "qwen2.5-vl": _of(tiny.qwen2_5_vl),
    "llama4": _of(tiny.llama4),
    "qwen2.5-omni": _of(tiny.qwen2_5_omni),
    # Code in the checkpoint (auto_map) that training must not import.
    "kimi-k25-remote": _of(_kimi(21, remote=True)),
    "kimi-k25-sharded": kimi_k25_sharded,
    # Hybrids: linear-attention or Mamba layers beside attention ones.
    "qwen3.5": _of(tiny.qwen3_5),
    "qwen3.5-moe": _of(tiny.qwen3_5_moe),
    "kimi-linear": _of(tiny.kimi_linear),
    "nemotron-h": _of(tiny.nemotron_h),
    "lfm2": _of(tiny.lfm2),
}

#: The zoo's hybrid members (``evaluate`` rolls their recurrent state back).
HYBRIDS = ("qwen3.5", "qwen3.5-moe", "kimi-linear", "nemotron-h", "lfm2")
