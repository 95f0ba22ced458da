"""The ``doctor`` command: its flags, and the parsed flags turned into
:class:`~.diagnose.DoctorOptions` for :func:`~.diagnose.diagnose`.

Exits non-zero when the report holds a problem.
"""

from __future__ import annotations

import argparse
import sys

from ..cli_args import (
    add_json_argument,
    add_verifier_weight_arguments,
    emit_report,
    positive_int,
    verifier_weight_kwargs,
)
from .diagnose import DoctorOptions, diagnose
from .draft import DraftChoices
from .report import render

__all__ = ["add_arguments", "options_from_args", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``doctor`` options."""
    parser.usage = "%(prog)s VERIFIER [options] [-- SPECULATORS_TRAIN_FLAG ...]"
    parser.epilog = (
        "After --, any `speculators train` flags (e.g. -- --block-size 8 "
        "--sample-from-anchor), read by train's own parser; where one repeats a "
        "doctor flag, the one after -- counts."
    )
    parser.set_defaults(train_flags=())
    parser.add_argument("verifier", help="local checkpoint directory or Hub id")
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="load the config with the checkpoint's code (default: read as data)",
    )
    add_json_argument(parser)
    parser.add_argument(
        "--check-values",
        action="store_true",
        help="also read the embedding, head and final norm (one at a time, in "
        "chunks) and report NaN/inf in them (default: read no tensor data)",
    )
    parser.add_argument(
        "--draft-vocab-size",
        type=positive_int,
        default=None,
        help="draft vocabulary for the estimate (default: the verifier's, as "
        "`speculators train` without --draft-vocab-size)",
    )
    parser.add_argument(
        "--num-layers",
        type=positive_int,
        default=None,
        help="as for `speculators train` (default: its default, 5 for the DFlash "
        "family, 1 otherwise)",
    )
    parser.add_argument(
        "--norm-before-fc",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="as for `speculators train` (default: its default for --draft-arch)",
    )
    parser.add_argument(
        "--norm-output",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="as for `speculators train` (default: its default)",
    )
    parser.add_argument(
        "--fc-norm", action="store_true", help="as for `speculators train`"
    )
    parser.add_argument(
        "--speculator-type",
        default="eagle3",
        help="the algorithm to check for, as for `speculators train` (eagle3, "
        "dflash, dflash2, dspark, xpress; peagle and mtp train, but vLLM 0.34 "
        "serves neither)",
    )
    parser.add_argument(
        "--draft-arch",
        choices=("llama", "qwen3", "deepseek_v3"),
        default=None,
        help="draft decoder layers to show and estimate, as for `speculators train` "
        "(default: its default, llama for eagle3, qwen3 otherwise; deepseek_v3: MLA "
        "with the verifier's latent attention geometry)",
    )
    add_verifier_weight_arguments(parser)


def options_from_args(args: argparse.Namespace) -> DoctorOptions:
    """The parsed ``doctor`` flags as the library's options."""
    return DoctorOptions(
        trust_remote_code=args.trust_remote_code,
        check_values=args.check_values,
        draft_vocab_size=args.draft_vocab_size,
        draft=DraftChoices(
            arch=args.draft_arch,
            num_layers=args.num_layers,
            norm_before_fc=args.norm_before_fc,
            norm_output=args.norm_output,
            fc_norm=args.fc_norm,
            speculator_type=args.speculator_type,
            train_flags=tuple(args.train_flags),
        ),
        weight_overrides=verifier_weight_kwargs(args),
    )


def run(args: argparse.Namespace) -> int:
    """Run ``doctor`` from parsed arguments: the report, exit 1 on a problem."""
    report = diagnose(args.verifier, options_from_args(args), progress=sys.stderr)
    emit_report(report.to_dict(), render(report), args)
    return 0 if report.ok else 1
