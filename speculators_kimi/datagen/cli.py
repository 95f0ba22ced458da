"""The ``generate-hidden-states`` command: its options, read once into
:class:`~.options.GenerationOptions`, and how errors are reported.

Known errors of the verifier (missing path, bad config, weights that cannot be
located: ``VerifierWeightsError``) go up to ``speculators-kimi``'s known-error
path (one line, exit 1); the context-window check and a non-local verifier are
reported here the same way.
"""

from __future__ import annotations

import argparse

from ..cli_args import (
    add_placement_arguments,
    add_verifier_weight_arguments,
    placement_from_args,
    positive_int,
    verifier_weight_kwargs,
)
from ..verifier.loading import DTYPES
from .generate import run_generation
from .options import GenerationOptions

__all__ = ["add_arguments", "options_from_args", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``generate-hidden-states`` options."""
    parser.add_argument(
        "--verifier",
        "--verifier-name-or-path",
        dest="verifier",
        required=True,
        help="local verifier directory (config.json + safetensors)",
    )
    parser.add_argument(
        "--data-path",
        required=True,
        help="output directory of `speculators prepare-data`",
    )
    parser.add_argument(
        "--output-dir",
        default=None,
        help="where hs_<i>.safetensors go (default: DATA_PATH/hidden_states)",
    )
    parser.add_argument(
        "--target-layer-ids",
        type=int,
        nargs="+",
        default=None,
        help="aux layer ids (default: upstream trainer's [2, n//2, n-3]); pass "
        "the same ids to `speculators train`",
    )
    parser.add_argument(
        "--dtype", choices=sorted(DTYPES), default=GenerationOptions.dtype
    )
    parser.add_argument(
        "--batch-size", type=positive_int, default=GenerationOptions.batch_size
    )
    parser.add_argument(
        "--max-batch-tokens",
        type=positive_int,
        default=GenerationOptions.max_batch_tokens,
        help="upper bound on padded tokens per batch",
    )
    add_placement_arguments(parser)
    parser.add_argument("--trust-remote-code", action="store_true")
    add_verifier_weight_arguments(parser)
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="redo files that are complete, and replace those made with other "
        "--target-layer-ids or --dtype (refused without it)",
    )
    parser.add_argument(
        "--on-mismatch",
        choices=("regenerate", "error"),
        default=GenerationOptions.on_mismatch,
        help="finished files of another verifier (other weights or config) in "
        "the output directory: regenerate them (default), or stop before any work",
    )
    parser.add_argument("--no-progress", action="store_true")


def options_from_args(args: argparse.Namespace) -> GenerationOptions:
    """The parsed flags as the run's options (the placement flags checked)."""
    return GenerationOptions(
        verifier=args.verifier,
        data_path=args.data_path,
        output_dir=args.output_dir,
        target_layer_ids=args.target_layer_ids,
        dtype=args.dtype,
        device=args.device,
        batch_size=args.batch_size,
        max_batch_tokens=args.max_batch_tokens,
        trust_remote_code=args.trust_remote_code,
        weight_overrides=verifier_weight_kwargs(args),
        progress=not args.no_progress,
        overwrite=args.overwrite,
        placement=placement_from_args(args),
        on_mismatch=args.on_mismatch,
    )


def run(args: argparse.Namespace) -> int:
    """Run ``generate-hidden-states`` from parsed arguments."""
    from speculators.utils.cli_errors import check_model_source

    check_model_source(args.verifier, "--verifier")
    res = run_generation(options_from_args(args))
    replaced = (
        (res.other_verifier, "of them replacing another verifier's"),
        (res.other_tokens, "replacing states of other tokens"),
    )
    others = "".join(f", {count} {what}" for count, what in replaced if count)
    if res.rank == 0:
        ranks = f" by {res.world_size} ranks" if res.world_size > 1 else ""
        print(
            f"hidden states: {res.output_dir} ({res.written} written{ranks}{others}, "
            f"{res.skipped} already complete); target layer ids "
            f"{res.target_layer_ids}"
        )
    return 0
