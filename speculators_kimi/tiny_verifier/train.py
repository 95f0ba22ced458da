"""The ``speculators train`` command line for a run on local artifacts.

Built in one place for every caller (the demo's train stage, the tiny CPU runs
of the tests and ``examples/train_tiny_llama.sh``), so the flags a local run
needs (no dataloader workers, missing hidden states an error, where checkpoints
and logs go) are written once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .dataset import resolve_target_layer_ids
from .specs import TinyVerifierSpec

__all__ = ["TrainArgs", "train_args", "train_command"]


@dataclass(frozen=True)
class TrainArgs:
    """What a ``speculators train`` run is given; a ``None`` leaves its flag out
    (the trainer's default)."""

    verifier: Path
    data: Path
    save_dir: Path  # checkpoints/ and logs/ go under it
    total_seq_len: int
    epochs: int
    draft_arch: str | None = None
    speculator_type: str = "eagle3"
    train_data_ratio: float | None = None
    max_steps: int | None = None
    lr: float | None = None
    scheduler_type: str | None = None
    log_freq: int | None = None
    resume: bool = True  # False: --no-resume-from-checkpoint
    draft_vocab_size: int | None = None
    target_layer_ids: tuple[int, ...] | None = None
    extra: tuple[str, ...] = ()  # appended as they are


def _flag(name: str, value: object) -> list[str]:
    return [] if value is None else [name, str(value)]


def train_args(run: TrainArgs) -> list[str]:
    """The arguments after the words ``speculators train``."""
    return [
        "--verifier-name-or-path",
        str(run.verifier),
        "--data-path",
        str(run.data),
        "--speculator-type",
        run.speculator_type,
        *_flag("--draft-arch", run.draft_arch),
        "--total-seq-len",
        str(run.total_seq_len),
        *_flag("--train-data-ratio", run.train_data_ratio),
        "--epochs",
        str(run.epochs),
        *_flag("--max-steps", run.max_steps),
        *_flag("--lr", run.lr),
        *_flag("--scheduler-type", run.scheduler_type),
        "--num-workers",
        "0",
        "--on-missing",
        "raise",
        *_flag("--log-freq", run.log_freq),
        "--save-path",
        str(run.save_dir / "checkpoints"),
        "--log-dir",
        str(run.save_dir / "logs"),
        *([] if run.resume else ["--no-resume-from-checkpoint"]),
        *_flag("--draft-vocab-size", run.draft_vocab_size),
        *(
            ["--target-layer-ids", *map(str, run.target_layer_ids)]
            if run.target_layer_ids is not None
            else []
        ),
        *run.extra,
    ]


def train_command(
    spec: TinyVerifierSpec,
    verifier_dir: Path,
    data_dir: Path,
    save_dir: Path,
    *,
    max_steps: int = 3,
    total_seq_len: int = 128,
) -> list[str]:
    """The ``speculators train`` argv for a tiny CPU run on the built artifacts
    (from scratch; the aux layer ids only where the trainer's default would not
    do)."""
    layer_ids, explicit = resolve_target_layer_ids(spec)
    run = TrainArgs(
        verifier=verifier_dir,
        data=data_dir,
        save_dir=save_dir,
        total_seq_len=total_seq_len,
        epochs=1,
        max_steps=max_steps,
        resume=False,
        target_layer_ids=tuple(layer_ids) if explicit else None,
    )
    return ["speculators", "train", *train_args(run)]
