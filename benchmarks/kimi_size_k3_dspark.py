"""The MLA DSpark draft at Kimi-K2.5's real size: built, exported as vLLM's
``k3_dspark``, checked with vLLM's ``K3DSparkForCausalLM``.

    python benchmarks/kimi_size_k3_dspark.py --work DIR [--layers 1] [--json OUT]

The draft ``speculators train --speculator-type dspark --draft-arch deepseek_v3``
builds (its own ``build_draft_model``, in bf16, on a Kimi-K2.5 Hub layout with
real-size bf16 embedding, head and norm: hidden 7168, vocabulary 163840, MLA
ranks 1536/512, rope 64), saved as a trained checkpoint, ``speculators-kimi
export``, then ``speculators-kimi vllm-check --synthetic-aux-states`` (every
parameter loaded, one block step's logits with the Markov bias against ours) with
the check's own peak memory. The verifier's decoder is not built (it does not fit
a CPU box): the aux states are drawn at its width, the same for both drafts.
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

HUB_ID = "moonshotai/Kimi-K2.5"


def build_checkpoint(verifier: Path, layers: int, out: Path) -> dict:
    """The MLA DSpark training builds, in bf16, saved; its parameter counts."""
    import torch
    from speculators.models.dspark import DSparkDraftModel
    from speculators.train.cli import build_draft_model
    from speculators.train.config import TrainConfig

    argv = ["--verifier-name-or-path", str(verifier), "--data-path", "unused"]
    argv += ["--speculator-type", "dspark", "--draft-arch", "deepseek_v3"]
    argv += ["--num-layers", str(layers), "--block-size", "8"]
    argv += ["--mask-token-id", "0"]  # the skeleton has no tokenizer to ask
    args = argparse.Namespace(**TrainConfig.resolve(argv).flatten())
    t0 = time.perf_counter()
    torch.set_default_dtype(torch.bfloat16)
    try:
        model = build_draft_model(args, DSparkDraftModel, None, None, KIMI_VOCAB)
    finally:
        torch.set_default_dtype(torch.float32)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # away from init: every module changes the logits
        for name, p in model.named_parameters():
            if p.requires_grad and not name.startswith(("embed", "lm_head")):
                p.add_((torch.randn(p.shape, generator=gen) * 0.02).to(p.dtype))
    params = list(model.parameters())
    trainable = sum(p.numel() for p in params if p.requires_grad)
    frozen = sum(p.numel() for p in params if not p.requires_grad)
    model.save_pretrained(out)
    del model, params
    gc.collect()
    return {
        "draft_layers": layers,
        "trainable_params": trainable,
        "frozen_params": frozen,
        "build_and_save_seconds": round(time.perf_counter() - t0, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="scratch (~10 GB)")
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    verifier = args.work / "kimi-k2.5"
    if not (verifier / "config.json").is_file():
        kimi_size_verifier(verifier)
    ckpt, out = args.work / "ckpt-k3-dspark", args.work / "export-k3-dspark"
    row = build_checkpoint(verifier, args.layers, ckpt)
    keys = ("layout", "draft_module", "aux_states", "parameters_not_loaded")
    keys += ("aux_layers", "kv_cache_pages", "one_step", "memory", "check_seconds")
    report = args.work / "vllm-k3-dspark.json"
    row |= export_and_vllm_check(ckpt, out, verifier, HUB_ID, report, keys)
    result = {
        "benchmark": "kimi_size_k3_dspark",
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": f"cpu: {cpu_model()}",
        "command": " ".join(["python", *sys.argv]),
        "k3_dspark": row,
        "benchmark_process": process_memory(),
    }
    print(json.dumps(result, indent=2), flush=True)
    save_json_report(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
