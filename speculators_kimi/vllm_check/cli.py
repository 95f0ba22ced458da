"""The ``vllm-check`` command: its options, the size check, the scratch
environment, and the check run in it (:mod:`.inner`), reported."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..cli_args import add_json_argument, emit_report, positive_int
from ..errors import CommandError, local_directory
from .env import VLLM_VERSION, VLLM_VERSIONS, default_env, ensure_env
from .request import CheckRequest
from .verdict import problems

__all__ = ["add_arguments", "format_report", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``vllm-check`` options."""
    parser.add_argument("export", help="directory written by speculators-kimi export")
    parser.add_argument("--checkpoint", required=True, help="the trained checkpoint")
    parser.add_argument("--verifier", required=True, help="local verifier directory")
    parser.add_argument(
        "--vllm-version",
        choices=VLLM_VERSIONS,
        default=VLLM_VERSION,
        help="the vLLM release whose code checks the export",
    )
    parser.add_argument(
        "--env",
        type=Path,
        default=None,
        help="the scratch environment (default: one under ~/.cache/speculators-kimi "
        "for this vLLM version and this environment)",
    )
    parser.add_argument(
        "--tokens",
        type=positive_int,
        default=24,
        help="context tokens before the step both drafts take",
    )
    parser.add_argument(
        "--synthetic-aux-states",
        action="store_true",
        help="feed both drafts aux states drawn at the verifier's width instead of "
        "running the verifier's decoder (a real-size verifier does not fit a CPU "
        "box): proves the export's parsing, loading and the draft's own step, "
        "not the verifier's capture",
    )
    parser.add_argument(
        "--num-speculative-tokens",
        type=positive_int,
        default=None,
        help="for a native export: the speculative config's num_speculative_tokens "
        "(MLA EAGLE-3: default 3; MLA DSpark: default its block size, as vLLM "
        "does; XPress: default its block size - 1, as the export's serve line)",
    )
    add_json_argument(parser)


def format_report(report: dict[str, Any]) -> str:
    step = report.get("one_step") or {}
    missing = report.get("parameters_not_loaded") or []
    causality = report.get("causality")
    lines = []
    if causality is not None:
        lines.append(
            "block causality per layer: trained "
            f"{causality['trained']}, vLLM {causality['vllm']}"
            + ("" if causality["as_trained"] else " (DIFFERENT)")
        )
    aux = report.get("aux_layers")
    if aux is not None:
        lines.append(
            f"verifier layers read: trained {aux['trained']}, vLLM {aux['vllm']}"
            + ("" if aux["trained"] == aux["vllm"] else " (DIFFERENT)")
        )
    pages = report.get("kv_cache_pages")
    if pages:
        widths = sorted({page[-1] for page in pages})
        lines.append(
            f"KV cache: {len(pages)} layer(s), pages {list(pages[0])}, latent "
            f"width {', '.join(map(str, widths))}"
        )
    jacobi = report.get("jacobi")
    if jacobi is not None:
        lines.append(
            f"XPress block after {jacobi['passes']} Jacobi passes (top-C "
            f"{jacobi['topc']}): vLLM's kernels {jacobi['vllm']}, evaluate "
            f"{jacobi['evaluate']}" + ("" if jacobi["same"] else " (DIFFERENT)")
        )
    confidence = step.get("max_abs_confidence_diff")
    if confidence is not None:
        lines.append(f"confidence head: max difference {confidence:.3g}")
    return "\n".join(
        [
            f"vLLM {report['vllm']} ({report['layout']} layout): "
            + ("every parameter loaded" if not missing else f"NOT loaded: {missing}"),
            f"one step over {step.get('tokens')} tokens: max relative logit "
            f"difference {step.get('max_rel_logit_diff')}, same argmax "
            f"{step.get('same_argmax')}",
            *lines,
            f"checked in {report['check_seconds']} s",
            *(
                [f"note: {report['verifier_aux_states']}"]
                if report.get("verifier_aux_states")
                else []
            ),
        ]
    )


def _verifier_note(verifier: str, version: str) -> str | None:
    """Why vLLM cannot take aux hidden states from this verifier (its
    config.json's architecture), which this check, loading the draft alone,
    cannot see; None when it can, or for a release the list does not describe."""
    from ..served_verifiers import VLLM_VERSION, aux_states_note

    if version != VLLM_VERSION:
        return None
    config = json.loads((Path(verifier) / "config.json").read_text())
    return aux_states_note(config.get("architectures"))


def _draft_kind(config: dict[str, Any]) -> str:
    """The algorithm of a checkpoint's or an export's ``config.json``: the
    speculators layouts name it; vLLM's native ones are DSpark (``k3_dspark``),
    XPress (``Qwen3XPressModel``) or EAGLE-3 (the MLA layout)."""
    from ..export.k3_dspark import K3_MODEL_TYPE
    from ..export.xpress import is_xpress_export

    if "speculators_model_type" in config:
        return str(config["speculators_model_type"])
    if is_xpress_export(config):
        return "xpress"
    return "dspark" if config.get("model_type") == K3_MODEL_TYPE else "eagle3"


def _check_written_from(args: argparse.Namespace, export: Path, trained: Path) -> None:
    """The export's tensors are the checkpoint's (renamed or not): a checkpoint of
    another epoch or run made vLLM's logits differ, which blamed vLLM."""
    from ..draft_weights import tensor_digests

    theirs = set(tensor_digests(trained).values())
    foreign = [n for n, d in tensor_digests(export).items() if d not in theirs]
    if foreign:
        raise CommandError(
            f"export {args.export} was not written from --checkpoint "
            f"{args.checkpoint}: {len(foreign)} of its tensors (e.g. {foreign[0]}) "
            "are not in it; give the checkpoint the export was written from, or "
            f"export this one: speculators-kimi export {args.checkpoint} --out DIR"
        )


def run(args: argparse.Namespace) -> int:
    """Run ``vllm-check`` from parsed arguments."""
    from ..draft_weights import draft_weights
    from ..export.serving_config import layout_of
    from ..served import served_tokens
    from ..verifier.fit import check_draft_fits
    from .size import check_decoder_fits

    for flag, path in (("export", args.export), ("--checkpoint", args.checkpoint)):
        if not (Path(path) / "config.json").is_file():
            best = Path(path) / "checkpoint_best"
            hint = f"; a run's checkpoints: pass one, e.g. {best}"
            raise CommandError(
                f"{flag} {path}: no config.json{hint if best.is_dir() else ''}"
            )
    if (Path(args.export) / "training_state.json").is_file():
        raise CommandError(
            f"export {args.export}: a training checkpoint (it holds "
            "training_state.json), not an export; write one first: speculators-kimi "
            f"export {args.export} --out DIR, then vllm-check DIR --checkpoint "
            f"{args.export} --verifier {args.verifier}"
        )
    export_config = json.loads((Path(args.export) / "config.json").read_text())
    algorithm = export_config.get("speculators_model_type")
    if algorithm is not None and layout_of(export_config) == "native":
        kind = "an XPress" if algorithm == "xpress" else "an MLA"
        raise CommandError(
            f"export {args.export}: {kind} checkpoint, not an export (vLLM serves "
            "it only in its native layout); write one first: speculators-kimi "
            f"export {args.export} --out DIR, then vllm-check DIR --checkpoint "
            f"{args.export} --verifier {args.verifier}"
        )
    if (
        args.num_speculative_tokens is not None
        and "speculators_config" in export_config
    ):
        # vLLM reads K from this layout's config.json: the flag would be ignored
        raise CommandError(
            f"--num-speculative-tokens is for a native export; export {args.export} "
            "is in the speculators format, whose config.json sets it "
            f"(speculative_tokens {served_tokens(export_config)}): drop the flag"
        )
    exported = _draft_kind(export_config)
    trained = _draft_kind(
        json.loads((Path(args.checkpoint) / "config.json").read_text())
    )
    if exported != trained:
        raise CommandError(
            f"export {args.export} is a draft of kind {exported} and --checkpoint "
            f"{args.checkpoint} one of kind {trained}: give the checkpoint the export "
            "was written from"
        )
    local_directory(args.verifier, "--verifier", "a local copy of the verifier")
    weights = [
        draft_weights(path, "export again from a whole checkpoint")
        for path in (args.export, args.checkpoint)
    ]
    _check_written_from(args, *weights)
    # another width, vocabulary or depth: one line, not the scratch env's traceback
    check_draft_fits(args.checkpoint, args.verifier)
    if not args.synthetic_aux_states:
        check_decoder_fits(args.verifier)
    version = args.vllm_version
    python = ensure_env(args.env or default_env(version), version)
    request = CheckRequest(
        export=args.export,
        checkpoint=args.checkpoint,
        verifier=args.verifier,
        tokens=args.tokens,
        synthetic_aux_states=args.synthetic_aux_states,
        num_speculative_tokens=args.num_speculative_tokens,
    )
    inner = [str(python), "-m", "speculators_kimi.vllm_check.inner"]
    t0 = time.perf_counter()
    proc = subprocess.run(
        [*inner, json.dumps(asdict(request))],
        env=dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"),
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-6000:])
        raise CommandError(
            f"vLLM {version}'s check of {args.export} failed (exit {proc.returncode}); "
            "its output is above"
        )
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    report["check_seconds"] = round(time.perf_counter() - t0, 1)
    report["verifier_aux_states"] = _verifier_note(args.verifier, version)
    report["problems"] = problems(report)
    emit_report(report, format_report(report), args)
    for problem in report["problems"]:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if report["problems"] else 0
