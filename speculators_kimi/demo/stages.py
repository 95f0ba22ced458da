"""The demo's six stages, each a plain function of the :class:`DemoContext`.

Each returns the small result its stage marker records (the report is made from
these); what a stage writes is under :class:`DemoPaths`. The heavy libraries
(torch, transformers, datasets, upstream's speculators) are imported by the
stage that needs them, so ``speculators-kimi demo --help`` stays fast.
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..stage_cache import STAGES_DIRNAME
from .settings import Conversation, DemoSettings
from .stream import stream

if TYPE_CHECKING:
    from ..tiny_verifier import KimiTinySpec

__all__ = [
    "DemoContext",
    "DemoPaths",
    "acceptance",
    "block_drafter",
    "build_data",
    "build_verifier",
    "hidden_states",
    "last_checkpoint",
    "regenerate",
    "train",
    "train_argv",
]

_LOSS = re.compile(r"train/loss=([-+0-9.e]+|nan|inf)")


@dataclass(frozen=True)
class DemoPaths:
    """Where each stage writes, under the demo's working directory ``out``."""

    out: Path
    verifier: Path
    replies: Path
    data: Path
    run_dir: Path
    block_dir: Path  # the block drafter's run (``--block-drafter``)

    @property
    def written(self) -> tuple[Path, ...]:
        """Everything the demo writes under ``out``: what ``--fresh`` removes."""
        return (
            self.out / STAGES_DIRNAME,
            self.verifier,
            self.replies,
            self.data,
            self.run_dir,
            self.block_dir,
        )

    def foreign(self) -> list[str]:
        """Names in ``out`` the demo did not write, when ``out`` holds no demo
        (no stage records): a directory the demo must not take over."""
        if not self.out.is_dir() or (self.out / STAGES_DIRNAME).is_dir():
            return []
        return sorted(p.name for p in self.out.iterdir())

    @classmethod
    def under(cls, out: Path) -> DemoPaths:
        """The stages' paths below ``out``."""
        return cls(
            out,
            out / "verifier",
            out / "replies.jsonl",
            out / "data",
            out / "run",
            out / "run-block",
        )


@dataclass(frozen=True)
class DemoContext:
    """What the stages read (none of them changes it)."""

    paths: DemoPaths
    settings: DemoSettings
    spec: KimiTinySpec
    all_conversations: list[Conversation]  # every shipped one: the vocabulary
    conversations: list[Conversation]  # the first --num-samples: the replies


def last_checkpoint(checkpoints: Path) -> Path:
    """The trainer's newest numbered checkpoint under ``checkpoints``."""
    numbered = [p for p in checkpoints.iterdir() if p.is_dir() and p.name.isdigit()]
    if not numbered:
        raise FileNotFoundError(f"no checkpoint under {checkpoints}")
    return max(numbered, key=lambda p: int(p.name))


def build_verifier(ctx: DemoContext) -> dict[str, Any]:
    """``verifier``: the tiny random-weight Kimi-K2.5-shaped checkpoint."""
    from ..tiny_verifier import build_kimi_tiny

    # Every shipped conversation's words, whatever --num-samples says: the
    # verifier does not change with the sample count (a subset's words are a
    # prefix of these, so its token ids are the same either way).
    words = [w for c in ctx.all_conversations for t in c for w in t["content"].split()]
    build_kimi_tiny(ctx.paths.verifier, ctx.spec, words=words)
    return {"path": str(ctx.paths.verifier)}


def regenerate(ctx: DemoContext) -> dict[str, Any]:
    """``replies``: the verifier rewrites the assistant replies (greedy)."""
    from speculators.data_generation.local_render import LocalChatRenderer

    from ..datagen.responses import regenerate_replies
    from ..tiny_verifier import write_conversations
    from ..verifier.causal import load_causal_verifier

    # The replies the verifier itself writes: what the draft will draft.
    verifier = ctx.paths.verifier
    causal = load_causal_verifier(verifier, [])
    replies = regenerate_replies(
        causal,
        LocalChatRenderer(str(verifier)),
        ctx.conversations,
        max_new_tokens=ctx.settings.reply_tokens,
    )
    write_conversations(replies, ctx.paths.replies)
    return {"conversations": len(replies)}


def build_data(ctx: DemoContext) -> dict[str, Any]:
    """``data``: the replies rendered with the verifier's chat template."""
    from datasets import load_from_disk

    from ..tiny_verifier import prepare_data

    # `speculators prepare-data --render-endpoint local`: the verifier's chat
    # template renders each conversation, no vLLM server.
    prepare_data(ctx.paths.verifier, ctx.paths.replies, ctx.paths.data)
    seq_lens = load_from_disk(str(ctx.paths.data))["seq_len"]
    return {"samples": len(seq_lens), "max_len": int(max(seq_lens))}


def hidden_states(ctx: DemoContext) -> dict[str, Any]:
    """``hidden-states``: our ``generate-hidden-states`` on the rendered rows."""
    from ..datagen import generate_hidden_states

    paths = ctx.paths
    res = generate_hidden_states(paths.verifier, paths.data, dtype=ctx.settings.dtype)
    return {"written": res.written, "target_layer_ids": res.target_layer_ids}


def train_argv(
    verifier: Path, data: Path, run_dir: Path, s: DemoSettings, block: bool = False
) -> list[str]:
    """``speculators train`` arguments (after the ``speculators train`` words):
    the EAGLE-3 draft's, or (``block``) the block drafter's."""
    from ..tiny_verifier.train import TrainArgs, train_args

    # The step cap comes after the draft vocabulary, where the demo's command
    # line has always had it (the train stage records that line).
    cap = [] if s.max_steps is None else ["--max-steps", str(s.max_steps)]
    shape = ["--block-size", str(s.block_size), "--num-layers", str(s.block_layers)]
    # vLLM serves XPress with the verifier's full vocabulary only
    draft_vocab = None if block and s.block_drafter == "xpress" else s.draft_vocab_size
    return train_args(
        TrainArgs(
            verifier=verifier,
            data=data,
            save_dir=run_dir,
            total_seq_len=s.total_seq_len,
            epochs=s.epochs,
            draft_arch=None if block else s.draft_arch,
            speculator_type=(s.block_drafter or "dspark") if block else "eagle3",
            train_data_ratio=s.train_data_ratio,
            lr=s.lr,
            scheduler_type="none",
            log_freq=1,
            draft_vocab_size=draft_vocab or None,
            extra=(*cap, *shape) if block else (*cap, *s.extra_train_args),
        )
    )


def _train(argv: list[str], run_dir: Path) -> dict[str, Any]:
    """Upstream's ``speculators train ARGV``, logged under ``run_dir``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    speculators = str(Path(sys.executable).parent / "speculators")
    cmd = [speculators, "train", *argv]
    text = stream(cmd, run_dir / "train.log")
    losses = [float(x) for x in _LOSS.findall(text)]
    return {"losses": losses, "command": shlex.join(cmd)}


def train(ctx: DemoContext) -> dict[str, Any]:
    """``train``: upstream's ``speculators train``, its losses from its log."""
    paths = ctx.paths
    argv = train_argv(paths.verifier, paths.data, paths.run_dir, ctx.settings)
    return _train(argv, paths.run_dir)


def _eval_settings(s: DemoSettings) -> dict[str, int]:
    return {
        "num_speculative_tokens": s.eval_speculative_tokens,
        "max_new_tokens": s.eval_new_tokens,
    }


def acceptance(ctx: DemoContext) -> dict[str, Any]:
    """``acceptance``: the trained and the untrained draft decoding the
    held-out prompts, as ``speculators-kimi evaluate`` does."""
    from ..evaluate import dataset_prompts, load_session, untrained_copy

    # The held-out rows' prompts, as `speculators-kimi evaluate --data` takes them.
    s, paths = ctx.settings, ctx.paths
    ckpt = last_checkpoint(paths.run_dir / "checkpoints")
    session = load_session(ckpt, paths.verifier, dtype="float32", device="cpu")
    prompts = dataset_prompts(paths.data, train_data_ratio=s.train_data_ratio)
    settings = _eval_settings(s)
    results = {
        "trained": session.evaluate(prompts, **settings),
        "untrained": session.with_draft(untrained_copy(session.draft)).evaluate(
            prompts, **settings
        ),
        "trained_t1": session.evaluate(prompts, temperature=1.0, **settings),
    }
    return {name: r.as_dict() for name, r in results.items()}


def block_drafter(ctx: DemoContext) -> dict[str, Any]:
    """``block-drafter``: the block drafter (``--block-drafter``) trained by
    ``speculators train`` on the same data, then decoding the same held-out
    prompts as the EAGLE-3 draft."""
    from ..evaluate import dataset_prompts, load_session

    s, paths = ctx.settings, ctx.paths
    argv = train_argv(paths.verifier, paths.data, paths.block_dir, s, block=True)
    result = _train(argv, paths.block_dir)
    ckpt = last_checkpoint(paths.block_dir / "checkpoints")
    session = load_session(ckpt, paths.verifier, dtype="float32", device="cpu")
    prompts = dataset_prompts(paths.data, train_data_ratio=s.train_data_ratio)
    report = session.evaluate(prompts, **_eval_settings(s))
    return {
        **result,
        "algorithm": s.block_drafter,
        "checkpoint": str(ckpt),
        "trained": report.as_dict(),
    }
