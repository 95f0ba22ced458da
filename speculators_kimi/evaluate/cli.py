"""The ``evaluate`` command: acceptance length of a trained draft, before serving."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..cli_args import (
    add_json_argument,
    add_placement_arguments,
    add_verifier_weight_arguments,
    emit_report,
    placement_from_args,
    verifier_weight_kwargs,
)
from ..errors import CommandError, MissingInputError

__all__ = ["add_arguments", "draft_checkpoint", "run"]

DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``evaluate`` options."""
    parser.add_argument(
        "--draft",
        required=True,
        help="trained draft: a checkpoint directory (config.json), or a run's "
        "checkpoints directory (its checkpoint_best is used)",
    )
    parser.add_argument(
        "--verifier", required=True, help="local verifier directory (config.json)"
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--data",
        help="a `speculators prepare-data` directory: prompts of its held-out rows",
    )
    source.add_argument(
        "--prompts",
        help="JSONL of conversations ({'messages': [...]}): the turns before the "
        "last assistant reply, rendered with the verifier's chat template",
    )
    parser.add_argument("--num-speculative-tokens", "-k", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        help="0: greedy (checked lossless); > 0: rejection sampling",
    )
    parser.add_argument(
        "--num-prompts", type=int, default=None, help="use the first M prompts"
    )
    parser.add_argument(
        "--train-data-ratio",
        type=float,
        default=0.9,
        help="with --data: the training split, as given to `speculators train` "
        "(the rows after it are held out)",
    )
    parser.add_argument(
        "--split",
        choices=("val", "all"),
        default="val",
        help="with --data: held-out rows only (val) or every row",
    )
    parser.add_argument(
        "--chat-template-kwargs",
        default=None,
        help="with --prompts: template variables as a JSON object",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--dtype",
        choices=DTYPE_CHOICES,
        default="auto",
        help="auto: float32 on CPU, bfloat16 on GPU",
    )
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto")
    add_placement_arguments(parser)
    parser.add_argument("--trust-remote-code", action="store_true")
    add_verifier_weight_arguments(parser)
    add_json_argument(parser)
    parser.add_argument("--no-progress", action="store_true")


def draft_checkpoint(path: str | Path) -> Path:
    """The checkpoint directory of ``--draft``.

    :raises MissingInputError: neither a checkpoint nor a run's checkpoints.
    """
    path = Path(path)
    if (path / "config.json").is_file():
        return path
    best = path / "checkpoint_best"
    if (best / "config.json").is_file():
        return best.resolve()
    raise MissingInputError(
        f"--draft {path}: no config.json (nor checkpoint_best/config.json); point "
        "it at a checkpoint written by `speculators train`"
    )


def _template_kwargs(text: str | None) -> dict[str, Any] | None:
    """``--chat-template-kwargs`` parsed as ``speculators prepare-data`` parses it.

    :raises CommandError: not a JSON object (the flag named).
    """
    import typer
    from speculators.cli.prepare_data import parse_chat_template_kwargs

    try:
        return parse_chat_template_kwargs(text)
    except typer.BadParameter as err:
        raise CommandError(err.format_message()) from None


def format_report(report: dict[str, Any]) -> str:
    rates = ", ".join(f"{r:.3f}" for r in report["acceptance_rate_per_position"])
    lossless = report["lossless"]
    lines = [
        f"mean acceptance length  {report['mean_acceptance_length']:.3f} "
        f"(K={report['num_speculative_tokens']}, T={report['temperature']})",
        f"acceptance per position {rates}",
        f"prompts                 {report['num_prompts']} "
        f"({report['num_generated_tokens']} tokens generated, "
        f"{report['verifier_forwards']} verifier forwards)",
        f"wall time               {report['wall_time_s']} s",
    ]
    if lossless is not None:
        mismatched = report["mismatched_prompts"]
        lines.append(
            "lossless                "
            + ("yes" if lossless else f"NO: {len(mismatched)} prompt(s) differ")
            + f" (greedy decoding {report['greedy_wall_time_s']} s)"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run ``evaluate`` from parsed arguments."""
    from speculators.utils.cli_errors import check_model_source

    from .prompts import dataset_prompts, jsonl_prompts
    from .session import load_session

    check_model_source(args.verifier, "--verifier")
    checkpoint = draft_checkpoint(args.draft)
    placement = placement_from_args(args)
    if args.data:
        prompts = dataset_prompts(
            args.data, train_data_ratio=args.train_data_ratio, split=args.split
        )
    else:
        kwargs = _template_kwargs(args.chat_template_kwargs)
        prompts = jsonl_prompts(
            args.prompts,
            args.verifier,
            trust_remote_code=args.trust_remote_code,
            chat_template_kwargs=kwargs,
        )
    prompts = prompts[: args.num_prompts] if args.num_prompts else prompts
    session = load_session(
        checkpoint,
        args.verifier,
        dtype=args.dtype,
        device=args.device,
        placement=placement,
        trust_remote_code=args.trust_remote_code,
        weight_overrides=verifier_weight_kwargs(args),
    )
    report = session.evaluate(
        prompts,
        num_speculative_tokens=args.num_speculative_tokens,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        seed=args.seed,
        progress=not args.no_progress,
    ).as_dict()
    report = {"draft": str(checkpoint), "verifier": str(args.verifier), **report}
    emit_report(report, format_report(report), args)
    return 0
