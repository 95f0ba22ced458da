"""The ``evaluate`` command: acceptance length of a trained draft, before serving.

Its flags are read once into :class:`~.options.EvaluationOptions`; every step
after that reads the options, not the parsed Namespace.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..cli_args import (
    add_json_argument,
    add_placement_arguments,
    add_verifier_weight_arguments,
    emit_report,
    non_negative_float,
    placement_of,
    positive_int,
    save_json_report,
    verifier_weight_kwargs,
    writable_report_path,
)
from ..errors import CommandError, MissingInputError, local_directory
from .options import EvaluationOptions
from .text import format_epoch_table, format_report

if TYPE_CHECKING:
    from .prompts import Prompt
    from .report import EvaluationReport
    from .session import EvaluationSession

__all__ = ["add_arguments", "draft_checkpoint", "options_from_args", "run"]

DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``evaluate`` options."""
    d = EvaluationOptions  # its class attributes: the fields' defaults
    _add_what_to_evaluate(parser)
    parser.add_argument(
        "--num-speculative-tokens",
        "-k",
        type=positive_int,
        default=d.num_speculative_tokens,
        help="tokens proposed per step (default: what `export` serves the draft "
        "with: its speculative_tokens, a block drafter's block)",
    )
    parser.add_argument("--max-new-tokens", type=positive_int, default=d.max_new_tokens)
    parser.add_argument(
        "--temperature",
        type=non_negative_float,
        default=d.temperature,
        help="0: greedy (checked lossless); > 0: rejection sampling",
    )
    parser.add_argument(
        "--num-prompts", type=positive_int, default=None, help="use the first M prompts"
    )
    parser.add_argument(
        "--train-data-ratio",
        type=float,
        default=d.train_data_ratio,
        help="with --data: the training split, as given to `speculators train` "
        "(the rows after it are held out; default: the one the run recorded in its "
        "run.yaml, else 0.9)",
    )
    parser.add_argument(
        "--split",
        choices=("val", "all"),
        default=d.split,
        help="with --data: held-out rows only (val) or every row",
    )
    parser.add_argument(
        "--chat-template-kwargs",
        default=None,
        help="with --prompts: template variables as a JSON object",
    )
    parser.add_argument(
        "--context-length",
        type=positive_int,
        default=None,
        help="with --data: long prompts, each row's prompt after as many whole "
        "earlier conversations of the split as fit in this many tokens",
    )
    parser.add_argument(
        "--profile",
        default=None,
        type=writable_report_path,
        metavar="PATH",
        help="write the per-position acceptance profile (marginal and conditional "
        "rates, their counts, one row per request) as JSON to PATH",
    )
    parser.add_argument(
        "--each-epoch",
        action="store_true",
        help="--draft is a run's checkpoints directory: measure every epoch's "
        "checkpoint on the same prompts and pick the best by acceptance length",
    )
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument(
        "--dtype",
        choices=DTYPE_CHOICES,
        default=d.dtype,
        help="auto: float32 on CPU, bfloat16 on GPU",
    )
    add_placement_arguments(parser)
    parser.add_argument("--trust-remote-code", action="store_true")
    add_verifier_weight_arguments(parser)
    add_json_argument(parser)
    parser.add_argument("--no-progress", action="store_true")


def _add_what_to_evaluate(parser: argparse.ArgumentParser) -> None:
    """The draft, the verifier and where the prompts come from."""
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


def _prompts(o: EvaluationOptions, checkpoint: Path) -> tuple[list[Prompt], list[str]]:
    """The prompts ``--data`` or ``--prompts`` names, the first ``--num-prompts``,
    and what to warn about them; ``--data``'s held-out rows are those the run at
    ``checkpoint`` held out."""
    from speculators.train.data_checks import check_data_tokenizer

    from .prompts import context_prompts, dataset_prompts, jsonl_prompts
    from .run_record import data_arg, run_config

    warned: list[str] = []
    if o.data:
        local_directory(
            o.data, "--data", "the directory `speculators prepare-data` wrote"
        )
        check_data_tokenizer(o.data, o.verifier, trust_remote_code=o.trust_remote_code)
        ratio = o.train_data_ratio
        if ratio is None:
            found = run_config(checkpoint)
            ratio = float(data_arg(found[0] if found else {}, "train_data_ratio"))
            if found is None:
                warned.append(
                    f"no run.yaml in {checkpoint} or above it: holding out "
                    f"the last {1 - ratio:.0%} of --data (upstream's default); pass "
                    "--train-data-ratio as the run trained with"
                )
        if not o.context_length:
            prompts = dataset_prompts(o.data, train_data_ratio=ratio, split=o.split)
            return prompts[: o.num_prompts or None], warned
        prompts, short = context_prompts(
            o.data,
            context_length=o.context_length,
            train_data_ratio=ratio,
            split=o.split,
            num_prompts=o.num_prompts,
        )
        return prompts, [*warned, *([short] if short else [])]
    if o.context_length:
        raise CommandError("--context-length builds prompts from --data")
    assert o.prompts is not None  # the flags' group: --data or --prompts
    prompts = jsonl_prompts(
        o.prompts,
        o.verifier,
        trust_remote_code=o.trust_remote_code,
        chat_template_kwargs=_template_kwargs(o.chat_template_kwargs),
    )
    return prompts[: o.num_prompts or None], warned


def _dataset(o: EvaluationOptions) -> str:
    """Where the prompts came from, as the profile records it."""
    if o.data:
        long = f" (prompts of up to {o.context_length} tokens)"
        return str(o.data) + (long if o.context_length else "")
    return str(o.prompts)


def _decode(
    session: EvaluationSession, prompts: list[Prompt], o: EvaluationOptions
) -> EvaluationReport:
    return session.evaluate(
        prompts,
        num_speculative_tokens=o.num_speculative_tokens,
        max_new_tokens=o.max_new_tokens,
        temperature=o.temperature,
        seed=o.seed,
        progress=o.progress,
    )


def _each_epoch(
    session: EvaluationSession, prompts: list[Prompt], o: EvaluationOptions
) -> tuple[dict[str, Any], str]:
    """Every epoch's checkpoint measured: the table and its text."""
    from .epochs import epoch_table
    from .profile import draft_digest

    #: by the resolved path, as the table names each checkpoint
    reports: dict[str, EvaluationReport] = {}

    def measure(checkpoint: Path) -> float:
        report = _decode(session.with_checkpoint(checkpoint, o.verifier), prompts, o)
        reports[str(checkpoint.resolve())] = report
        return report.mean_acceptance_length

    table = epoch_table(o.draft, measure)
    if o.profile:
        best = table["best"]["checkpoint"]
        profile = reports[best].profile(_dataset(o), draft_digest(Path(best)))
        save_json_report(profile, o.profile, show=False)
    return table, format_epoch_table(table)


def _evaluate(o: EvaluationOptions) -> tuple[dict[str, Any], str]:
    """The evaluation ``o`` asks for: its report and the report's text."""
    from speculators.utils.cli_errors import check_model_source
    from speculators.utils.text_config import load_config_dict

    from ..draft_weights import draft_weights
    from ..served import served_tokens
    from .algorithms import check_decodable
    from .context import draft_lengths, length_warnings
    from .profile import draft_digest
    from .session import embedding_warning, load_session

    check_model_source(o.verifier, "--verifier")
    local_directory(o.verifier, "--verifier", "a local copy of the verifier")
    checkpoint = draft_checkpoint(o.draft)
    draft_weights(checkpoint, "evaluate another epoch's checkpoint, or train again")
    config = load_config_dict(checkpoint)
    if o.num_speculative_tokens is None:  # as the export serves it
        o = replace(o, num_speculative_tokens=served_tokens(config))
    # before the warnings below and any tensor: a draft that cannot be decoded
    check_decodable(checkpoint, config, o.num_speculative_tokens)
    prompts, warnings = _prompts(o, checkpoint)
    warnings += length_warnings(
        [len(p.token_ids) for p in prompts],
        o.max_new_tokens,
        draft_lengths(checkpoint),
    )
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr)
    session = load_session(
        checkpoint,
        o.verifier,
        dtype=o.dtype,
        device=o.device,
        placement=placement_of(o.device_map, o.max_memory, o.offload_folder),
        trust_remote_code=o.trust_remote_code,
        weight_overrides=o.weight_overrides,
    )
    mismatch = embedding_warning(checkpoint, session.draft, session.verifier)
    if mismatch is not None:
        print(f"warning: {mismatch}", file=sys.stderr)
    if o.each_epoch:
        return _each_epoch(session, prompts, o)
    result = _decode(session, prompts, o)
    if o.profile:
        profile = result.profile(_dataset(o), draft_digest(checkpoint))
        save_json_report(profile, o.profile, show=False)
    report = {
        "draft": str(checkpoint),
        "verifier": str(o.verifier),
        **result.as_dict(),
        "warnings": warnings,
    }
    return report, format_report(report)


def options_from_args(args: argparse.Namespace) -> EvaluationOptions:
    """The parsed ``evaluate`` flags as the run's options."""
    return EvaluationOptions(
        draft=args.draft,
        verifier=args.verifier,
        data=args.data,
        prompts=args.prompts,
        num_speculative_tokens=args.num_speculative_tokens,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        num_prompts=args.num_prompts,
        train_data_ratio=args.train_data_ratio,
        split=args.split,
        chat_template_kwargs=args.chat_template_kwargs,
        context_length=args.context_length,
        profile=args.profile,
        each_epoch=args.each_epoch,
        seed=args.seed,
        dtype=args.dtype,
        device=args.device,
        device_map=args.device_map,
        max_memory=args.max_memory,
        offload_folder=args.offload_folder,
        trust_remote_code=args.trust_remote_code,
        weight_overrides=verifier_weight_kwargs(args),
        progress=not args.no_progress,
    )


def run(args: argparse.Namespace) -> int:
    """Run ``evaluate`` from parsed arguments."""
    report, text = _evaluate(options_from_args(args))
    emit_report(report, text, args)
    return 0
