"""The ``export`` command: its options, read into :func:`.draft.export_draft`'s
arguments, and what was written and how to serve it, printed."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..served_verifiers import aux_states_note
from .draft import export_draft
from .k3_dspark import K3_CLASS
from .launch import launch_commands
from .serving_config import MLA_ARCHITECTURE
from .xpress import XPRESS_CLASS

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``export`` options."""
    parser.add_argument(
        "checkpoint",
        help="a checkpoint of `speculators train`, or the table of `speculators-kimi "
        "evaluate --each-epoch --json PATH` (the epoch it picked is exported)",
    )
    parser.add_argument("--out", required=True, help="directory to write")
    parser.add_argument(
        "--verifier-id",
        default=None,
        help="the verifier's Hugging Face Hub id (default: found from the checkpoint)",
    )
    parser.add_argument(
        "--verifier",
        default=None,
        help="local verifier directory to compare the embedding with, refused if "
        "it is not of the draft's geometry (default: the recorded path, when it "
        "exists)",
    )
    parser.add_argument(
        "--keep-embeddings",
        action="store_true",
        help="ship the draft's embedding even when it equals the verifier's",
    )
    parser.add_argument(
        "--profile",
        default=None,
        help="an acceptance profile of `speculators-kimi evaluate --profile`, "
        "copied into the export as speculation_profile.json",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a non-empty --out whole (by default it is refused)",
    )


def run(args: argparse.Namespace) -> int:
    """Run ``export`` from parsed arguments."""
    result = export_draft(
        args.checkpoint,
        args.out,
        verifier_id=args.verifier_id,
        keep_embeddings=args.keep_embeddings,
        verifier=args.verifier,
        overwrite=args.overwrite,
        profile=args.profile,
    )
    source = args.checkpoint
    if result.checkpoint != Path(args.checkpoint):
        source = f"{result.checkpoint} (the pick of {args.checkpoint})"
    print(f"exported {source} -> {result.out} (verifier {result.verifier_id})")
    for name, why in result.dropped.items():
        print(f"  dropped {name}: {why}")
    if result.causality is not None:
        how = (
            f"{result.architecture}'s non-causal block (non_causal_multi_token_decode)"
            if result.architecture == K3_CLASS
            else f"is_causal {str(result.causality.is_causal).lower()}"
            if result.causality.is_causal is not None
            else "vLLM's layer-type rule (sliding causal, full bidirectional)"
        )
        shown = ", ".join(
            "causal" if c else "bidirectional" for c in result.causality.layers
        )
        print(f"  block causality per layer as trained ({shown}), written as {how}")
    if result.trained_dtype:
        print(
            f"  trained in {result.trained_dtype}; vLLM runs the draft in the "
            "target's dtype (--dtype of the served model)"
        )
    if result.layout == "native":
        what = "an XPress" if result.architecture == XPRESS_CLASS else "an MLA"
        print(
            f"{what} draft, written for vLLM's "
            f"{result.architecture or MLA_ARCHITECTURE} (native layout); "
            "vLLM cannot detect it as a draft from `vllm serve DIR`, so serve the "
            "verifier with it as the speculative model:"
        )
    else:
        print("serve it with either:")
    for command in launch_commands(result):
        print(f"  {command}")
    note = aux_states_note(result.verifier_architectures)
    if note is not None:
        print(f"note: {note}")
    return 0
