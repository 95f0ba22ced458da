"""The ``demo`` command: its options, turned into :class:`DemoSettings`."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from ..cli_args import add_json_argument, emit_report, positive_int
from .pipeline import run_demo
from .report import format_report
from .settings import DemoSettings

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``demo`` options."""
    d = DemoSettings()
    parser.add_argument("--out", type=Path, default=d.out, help="working directory")
    parser.add_argument("--epochs", type=positive_int, default=d.epochs)
    parser.add_argument("--max-steps", type=positive_int, default=None)
    parser.add_argument(
        "--num-samples",
        type=positive_int,
        default=None,
        help="use the first N conversations",
    )
    parser.add_argument(
        "--draft-arch",
        choices=("llama", "deepseek_v3"),
        default=d.draft_arch,
        help="draft decoder layers: llama, or deepseek_v3 (MLA, with the verifier's "
        "latent attention geometry)",
    )
    parser.add_argument(
        "--block-drafter",
        choices=("dspark", "dflash", "xpress"),
        default=None,
        help="also train this block drafter on the same data and report its "
        "acceptance length beside the EAGLE-3 draft's",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="redo every stage (removes only what the demo wrote in --out)",
    )
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Run the demo from parsed arguments."""
    settings = DemoSettings(
        out=args.out,
        num_samples=args.num_samples,
        epochs=args.epochs,
        max_steps=args.max_steps,
        draft_arch=args.draft_arch,
        fresh=args.fresh,
        block_drafter=args.block_drafter,
    )
    # With the JSON on stdout, the stages' progress goes to stderr: stdout is
    # the JSON alone, for a program to read.
    progress = sys.stderr if args.json == "-" else sys.stdout
    with contextlib.redirect_stdout(progress):
        report = run_demo(settings)
    emit_report(report, format_report(report), args)
    return 0
