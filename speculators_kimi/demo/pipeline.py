"""``run_demo``: the stages in order through a :class:`~..stage_cache.StageCache`,
then the report.

Each stage's inputs (the settings its result depends on) are what a rerun
compares: unchanged, the stage is reused; changed, it is redone with every stage
after it. They are the markers' keys, so they stay as earlier demos wrote them.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import asdict
from functools import partial
from typing import Any

from ..errors import CommandError
from ..stage_cache import Stage, StageCache
from . import stages
from .settings import DemoSettings, dataset_digest, load_conversations
from .stages import DemoContext, DemoPaths, last_checkpoint

__all__ = ["run_demo"]

# The demo's lines print as ``[demo] ...``, whichever of its modules logs them.
logger = logging.getLogger("speculators_kimi.demo")


def _say(msg: str) -> None:
    logger.info("%s", msg)


def _stage_cache(ctx: DemoContext) -> StageCache:
    """The six stages with their inputs, outputs and functions."""
    from ..datagen import HS_DIRNAME

    s, paths = ctx.settings, ctx.paths
    dataset = dataset_digest()
    train_inputs = {
        "epochs": s.epochs,
        "max_steps": s.max_steps,
        "total_seq_len": s.total_seq_len,
        "lr": s.lr,
        "train_data_ratio": s.train_data_ratio,
        "draft_vocab_size": s.draft_vocab_size,
        "draft_arch": s.draft_arch,
        "extra_train_args": list(s.extra_train_args),
    }
    replies_inputs = {
        "num_samples": len(ctx.conversations),
        "dataset": dataset,
        "reply_tokens": s.reply_tokens,
    }
    acceptance_inputs = {
        "num_speculative_tokens": s.eval_speculative_tokens,
        "max_new_tokens": s.eval_new_tokens,
    }
    verifier_inputs = {"spec": asdict(ctx.spec), "dataset": dataset}
    return StageCache(
        paths.out,
        [
            Stage(
                "verifier",
                verifier_inputs,
                (paths.verifier,),
                partial(stages.build_verifier, ctx),
            ),
            Stage(
                "replies",
                replies_inputs,
                (paths.replies,),
                partial(stages.regenerate, ctx),
            ),
            Stage("data", {}, (paths.data,), partial(stages.build_data, ctx)),
            Stage(
                "hidden-states",
                {"dtype": s.dtype},
                (paths.data / HS_DIRNAME,),
                partial(stages.hidden_states, ctx),
            ),
            Stage("train", train_inputs, (paths.run_dir,), partial(stages.train, ctx)),
            Stage("acceptance", acceptance_inputs, (), partial(stages.acceptance, ctx)),
            Stage(
                "block-drafter",
                # Its training settings are the train stage's: a change there
                # redoes every later stage, this one too.
                {
                    "algorithm": s.block_drafter,
                    "block_size": s.block_size,
                    "block_layers": s.block_layers,
                },
                (paths.block_dir,),
                partial(stages.block_drafter, ctx),
            ),
        ],
        say=_say,
    )


def _report(
    paths: DemoPaths, results: dict[str, dict[str, Any]], t_start: float
) -> dict[str, Any]:
    """The report of a trained demo: the stages' results and the reloaded draft."""
    from speculators import SpeculatorModel

    info_data, info_hs, info_train, info_al = (
        results[k] for k in ("data", "hidden-states", "train", "acceptance")
    )
    ckpt = last_checkpoint(paths.run_dir / "checkpoints")
    model = SpeculatorModel.from_pretrained(str(ckpt))
    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    config = json.loads((ckpt / "config.json").read_text())
    metrics_file = ckpt / "val_metrics.json"
    metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else {}
    losses = info_train.get("losses") or []
    return {
        "out": str(paths.out),
        "verifier": str(paths.verifier),
        "data": str(paths.data),
        "checkpoint": str(ckpt),
        "samples": info_data.get("samples"),
        "target_layer_ids": info_hs.get("target_layer_ids"),
        "train_steps": len(losses),
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "val_loss": metrics.get("loss_epoch"),
        "val_step0_accuracy": metrics.get("full_acc_0_epoch"),
        "draft_class": type(model).__name__,
        "draft_arch": config.get("transformer_layer_config", {}).get("model_type"),
        "draft_trainable_params": n_params,
        "draft_vocab_size": config.get("draft_vocab_size"),
        "verifier_architectures": config.get("speculators_config", {})
        .get("verifier", {})
        .get("architectures"),
        "acceptance": info_al,
        "block_drafter": results.get("block-drafter"),
        "seconds": round(time.perf_counter() - t_start, 1),
    }


def run_demo(s: DemoSettings) -> dict[str, Any]:
    """Run every stage (reusing finished ones); return the report as a dict."""
    from ..tiny_verifier import KimiTinySpec

    paths = DemoPaths.under(s.out.resolve())
    if paths.out.exists() and not paths.out.is_dir():
        raise CommandError(f"--out {s.out} is a file: choose a new or empty directory")
    foreign = paths.foreign()
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise CommandError(
            f"--out {s.out} holds files no demo wrote ({shown}); the demo replaces "
            "its stages' directories there: choose a new or empty directory"
        )
    if s.fresh:
        for path in paths.written:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
    paths.out.mkdir(parents=True, exist_ok=True)
    ctx = DemoContext(
        paths=paths,
        settings=s,
        spec=KimiTinySpec(),
        all_conversations=load_conversations(),
        conversations=load_conversations(s.num_samples),
    )
    t_start = time.perf_counter()
    last = "block-drafter" if s.block_drafter else "acceptance"
    results = _stage_cache(ctx).run_all(last if s.train else "hidden-states")
    if not s.train:
        return {
            "out": str(paths.out),
            "verifier": str(paths.verifier),
            "data": str(paths.data),
        }
    return _report(paths, results, t_start)
