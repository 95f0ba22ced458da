"""Both draft layouts at Kimi-K2.5's real size: built, exported, checked with vLLM.

    python benchmarks/kimi_size_export.py --work DIR [--arch llama deepseek_v3]
        [--json OUT]

For each draft layout: the draft ``speculators train`` builds (its own
``build_draft_model``, on a Kimi-K2.5 Hub layout with real-size bf16 embedding,
head and norm: hidden 7168, vocabulary 163840, MLA ranks 1536/512), its
parameter counts against doctor's, saved in bf16 as a trained checkpoint,
``speculators-kimi export``, then ``speculators-kimi vllm-check
--synthetic-aux-states`` (vLLM's parser and draft class, 0.34 by default, every
parameter loaded, one draft step's logits against ours) with the check's own peak
memory. The verifier's decoder is not built (61 layers of 384 experts do not fit a
CPU box): the aux states are drawn at its width, the same for both drafts.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import sys
import time
from pathlib import Path

from bench_common import (  # this directory
    KIMI_VOCAB,
    cpu_model,
    export_and_vllm_check,
    kimi_size_verifier,
    process_memory,
)

from speculators_kimi.cli_args import save_json_report

ROOT = Path(__file__).resolve().parents[1]
DRAFT_VOCAB = 32000
HUB_ID = "moonshotai/Kimi-K2.5"
#: What each layout's row keeps of the vllm-check report.
CHECK_KEYS = (
    "layout",
    "draft_class",
    "aux_states",
    "parameters_not_loaded",
    "shared_from_verifier",
    "embedding_rows_equal_ours",
    "one_step",
    "memory",
    "check_seconds",
)


def build_checkpoint(verifier: Path, arch: str, out: Path) -> dict:
    """The draft training builds for ``arch``, saved in bf16; its counts."""
    import torch
    from speculators.models.eagle3 import Eagle3DraftModel
    from speculators.train.cli import build_draft_model
    from speculators.train.config import TrainConfig

    from speculators_kimi.doctor import DraftChoices, draft_options, draft_params
    from speculators_kimi.evaluate.session import cast_draft

    argv = ["--verifier-name-or-path", str(verifier), "--data-path", "unused"]
    argv += ["--mask-token-id", "0"]  # the skeleton has no tokenizer to ask
    args = argparse.Namespace(
        **TrainConfig.resolve([*argv, "--draft-arch", arch]).flatten()
    )
    t2d = torch.zeros(KIMI_VOCAB, dtype=torch.bool)
    t2d[:DRAFT_VOCAB] = True
    d2t = torch.zeros(DRAFT_VOCAB, dtype=torch.long)
    t0 = time.perf_counter()
    model = build_draft_model(args, Eagle3DraftModel, t2d, d2t, DRAFT_VOCAB)
    params = list(model.parameters())
    trainable = sum(p.numel() for p in params if p.requires_grad)
    frozen = sum(p.numel() for p in params if not p.requires_grad)
    doctor = draft_params(
        model.config.transformer_layer_config,
        draft_vocab=DRAFT_VOCAB,
        num_aux=len(model.config.eagle_aux_hidden_state_layer_ids),
        options=draft_options(str(verifier), DraftChoices(arch=arch)),
    )
    cast_draft(model, torch.bfloat16).save_pretrained(out)
    del model, params
    gc.collect()
    return {
        "trainable_params": trainable,
        "frozen_params": frozen,
        "doctor_params": list(doctor),
        "doctor_equal": list(doctor) == [trainable, frozen],
        "build_and_save_seconds": round(time.perf_counter() - t0, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="scratch (~20 GB)")
    parser.add_argument("--arch", nargs="+", default=["llama", "deepseek_v3"])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    verifier = args.work / "kimi-k2.5"
    if not (verifier / "config.json").is_file():
        kimi_size_verifier(verifier)
    result: dict = {
        "benchmark": "kimi_size_export",
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": f"cpu: {cpu_model()}",
        "command": " ".join(["python", *sys.argv]),
        "draft_vocab_size": DRAFT_VOCAB,
        "layouts": {},
    }
    for arch in args.arch:
        ckpt, out = args.work / f"ckpt-{arch}", args.work / f"export-{arch}"
        row = build_checkpoint(verifier, arch, ckpt)
        row |= export_and_vllm_check(
            ckpt, out, verifier, HUB_ID, args.work / f"vllm-{arch}.json", CHECK_KEYS
        )
        result["layouts"][arch] = row
        print(json.dumps({arch: row}, indent=2), flush=True)
    result["benchmark_process"] = process_memory()
    save_json_report(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
