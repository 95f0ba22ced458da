"""The block drafters at Kimi-K2.5's real size: built, exported, checked with
vLLM's own classes, the check's peak memory.

    python benchmarks/kimi_size_block_drafters.py --work DIR
        [--drafter k3_dspark dflash dspark xpress] [--layers 1] [--vocab N]
        [--json OUT]

For each drafter: the draft ``speculators train`` builds (its own
``build_draft_model``, in bf16, on a Kimi-K2.5 Hub layout with real-size bf16
embedding, head and norm: hidden 7168, vocabulary 163840, MLA ranks 1536/512,
rope 64), block 8, saved as a trained checkpoint, ``speculators-kimi export``,
then ``speculators-kimi vllm-check --synthetic-aux-states`` (every parameter
loaded, one block step's logits against ours) with the check's own peak memory.
``k3_dspark`` is the MLA DSpark (``--draft-arch deepseek_v3``, vLLM's
``K3DSparkForCausalLM``); the others have training's Qwen3 layers (vLLM's
``DFlashQwen3ForCausalLM``, ``Qwen3DSparkForCausalLM``,
``Qwen3XPressForCausalLM``). ``--vocab`` shrinks the vocabulary (to compare
with a check that does not fit at full size). The verifier's decoder is not
built (it does not fit a CPU box): the aux states are drawn at its width, the
same for both drafts.
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
#: Each drafter's training flags.
DRAFTERS = {
    "k3_dspark": ["--speculator-type", "dspark", "--draft-arch", "deepseek_v3"],
    "dflash": ["--speculator-type", "dflash"],
    "dspark": ["--speculator-type", "dspark"],
    "xpress": ["--speculator-type", "xpress"],
}
#: What each row keeps of the vllm-check report.
CHECK_KEYS = (
    "layout",
    "draft_module",
    "aux_states",
    "parameters_not_loaded",
    "shared_from_verifier",
    "one_step",
    "jacobi",
    "memory",
    "check_seconds",
)


def build_checkpoint(
    verifier: Path, drafter: str, layers: int, vocab: int, out: Path
) -> dict:
    """The draft training builds for ``drafter``, in bf16, saved; its counts."""
    import torch
    from speculators import SpeculatorModel
    from speculators.train.cli import build_draft_model
    from speculators.train.config import TrainConfig

    argv = ["--verifier-name-or-path", str(verifier), "--data-path", "unused"]
    argv += [*DRAFTERS[drafter], "--num-layers", str(layers), "--block-size", "8"]
    argv += ["--mask-token-id", "0"]  # the skeleton has no tokenizer to ask
    cfg = TrainConfig.resolve(argv)
    args = argparse.Namespace(**cfg.flatten())
    model_class = SpeculatorModel.registry[cfg.speculator_type]  # type: ignore[index]
    t0 = time.perf_counter()
    torch.set_default_dtype(torch.bfloat16)
    try:
        model = build_draft_model(args, model_class, None, None, vocab)
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
    parser.add_argument("--work", type=Path, required=True, help="scratch (~15 GB)")
    parser.add_argument(
        "--drafter", nargs="+", choices=tuple(DRAFTERS), default=list(DRAFTERS)
    )
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--vocab", type=int, default=KIMI_VOCAB)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    verifier = args.work / f"kimi-k2.5-{args.vocab}"
    if not (verifier / "config.json").is_file():
        kimi_size_verifier(verifier, vocab=args.vocab)
    rows = {}
    for drafter in args.drafter:
        ckpt, out = args.work / f"ckpt-{drafter}", args.work / f"export-{drafter}"
        row = build_checkpoint(verifier, drafter, args.layers, args.vocab, ckpt)
        report = args.work / f"vllm-{drafter}.json"
        row |= export_and_vllm_check(ckpt, out, verifier, HUB_ID, report, CHECK_KEYS)
        print(json.dumps({drafter: row}), flush=True)
        rows[drafter] = row
    result = {
        "benchmark": "kimi_size_block_drafters",
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": f"cpu: {cpu_model()}",
        "command": " ".join(["python", *sys.argv]),
        "vocab_size": args.vocab,
        "drafters": rows,
        "benchmark_process": process_memory(),
    }
    print(json.dumps(result, indent=2), flush=True)
    save_json_report(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
