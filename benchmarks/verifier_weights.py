"""Benchmark: verifier weight loading, ours (unit 0005) vs upstream 0.9.0.

Builds a synthetic sharded checkpoint in the Kimi-K2.5 Hub layout with a
Kimi-K2.5-sized embedding and head (vocab 163840, hidden 7168, bf16: ~2.3 GB per
tensor; embedding and head in different shards), then, each in a fresh
subprocess and alternating, loads what an EAGLE-3 draft with a 32k draft
vocabulary needs (embedding, selected head rows, final norm):

* ``upstream``: ``speculators.utils.loading.load_model_layers`` (unchanged from
  0.9.0) followed by ``head[t2d]``, as upstream ``_load_verifier_weights`` does;
* ``ours``: what ``DraftVocabMixin._load_verifier_weights`` now does:
  ``resolve_verifier_weights`` + ``load_verifier_tensors(head_rows=t2d,
  out={"embed": <embed param>, "head": <head param>})`` -- plain positional file
  reads straight into the parameters (selected head rows only), NaN/inf-checked
  chunk by chunk.

Both sides start from the same draft parameters (allocated, untouched, before
the timed region); upstream then copies into them as its call site does.

Reports peak RSS (``VmHWM`` of the child) and wall time of each, and their ratios
(ours / upstream), as JSON. Needs the patched package on the path, e.g.
``PYTHONPATH=/tmp/unit-weights/src python benchmarks/verifier_weights.py``.
The checkpoint is deleted afterwards unless ``--keep``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

VOCAB = 163840
HIDDEN = 7168
LAYERS = 61
DRAFT_VOCAB = 32768
PREFIX = "language_model"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def build_checkpoint(path: Path, vocab: int, hidden: int) -> None:
    import torch
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    text = {
        "model_type": "kimi_k2",
        "hidden_size": hidden,
        "vocab_size": vocab,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": 64,
        "num_key_value_heads": 64,
        "intermediate_size": 18432,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
    }
    config = {
        "model_type": "kimi_k25",
        "architectures": ["KimiK25ForConditionalGeneration"],
        "text_config": text,
        "tie_word_embeddings": True,
    }
    (path / "config.json").write_text(json.dumps(config))
    generator = torch.Generator().manual_seed(0)
    shards = [
        {
            f"{PREFIX}.model.embed_tokens.weight": torch.randn(
                vocab, hidden, generator=generator, dtype=torch.bfloat16
            )
        },
        {
            f"{PREFIX}.model.layers.{i}.input_layernorm.weight": torch.ones(
                hidden, dtype=torch.bfloat16
            )
            for i in range(LAYERS)
        },
        {
            f"{PREFIX}.lm_head.weight": torch.randn(
                vocab, hidden, generator=generator, dtype=torch.bfloat16
            ),
            f"{PREFIX}.model.norm.weight": torch.rand(
                hidden, generator=generator, dtype=torch.bfloat16
            )
            + 0.5,
        },
    ]
    weight_map = {}
    for i, tensors in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(tensors, str(path / name))
        weight_map.update(dict.fromkeys(tensors, name))
        shards[i] = {}
        del tensors
    (path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )


CHILD = r"""
import json, sys, time
import torch
mode, path = sys.argv[1], sys.argv[2]
vocab, hidden, draft = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
from speculators.utils.loading import load_model_layers
from speculators.utils.verifier_weights import (
    load_verifier_tensors, resolve_verifier_weights,
)
from loguru import logger
logger.remove()


def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


# Training has read the verifier's config before loading weights (draft config,
# target layers): do the same here so neither side pays transformers' lazy
# config-module imports inside the timed region.
from speculators.utils.text_config import load_text_config
load_text_config(path)
t2d = torch.zeros(vocab, dtype=torch.bool)
t2d[torch.randperm(vocab, generator=torch.Generator().manual_seed(0))[:draft]] = True
# The draft's parameters exist before weights load (here untouched, so not yet
# resident: both sides pay for the pages they write).
embed_param = torch.empty(vocab, hidden, dtype=torch.bfloat16)
head_param = torch.empty(draft, hidden, dtype=torch.bfloat16)
norm_param = torch.empty(hidden, dtype=torch.bfloat16)
# VmHWM/VmRSS are per address space (reset at exec); ru_maxrss is not (Linux
# carries the parent's high-water mark across fork + exec).
base = status("VmRSS")
start = time.perf_counter()
if mode == "upstream":
    w = load_model_layers(
        ["embed_tokens.weight", "lm_head.weight", "model.norm.weight"], path
    )
    embed, norm = w["embed_tokens.weight"], w["model.norm.weight"]
    head = w["lm_head.weight"][t2d, :]
    loaded = time.perf_counter() - start
    # What upstream's call site does next: copy into the draft's parameters.
    embed_param.copy_(embed)
    head_param.copy_(head)
    norm_param.copy_(norm)
else:
    # What the call site (DraftVocabMixin._load_verifier_weights) does: read
    # straight into the parameters (out=), only the selected head rows.
    spec = resolve_verifier_weights(path)
    t = load_verifier_tensors(
        spec, head_rows=t2d, out={"embed": embed_param, "head": head_param}
    )
    assert t.embed is embed_param and t.head is head_param
    loaded = time.perf_counter() - start
    norm_param.copy_(t.norm_weight)
elapsed = time.perf_counter() - start
peak = status("VmHWM")
print(json.dumps({
    "wall_s": elapsed,
    "load_only_wall_s": loaded,
    "peak_rss_mib": peak,
    "baseline_rss_mib": base,
    "peak_virtual_mib": status("VmPeak"),
    "head_shape": list(head_param.shape),
    "checksum": [float(embed_param[:1000].float().sum()),
                 float(head_param.float().sum()), float(norm_param.float().sum())],
}))
"""


def run_child(mode: str, path: Path, vocab: int, hidden: int, draft: int) -> dict:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            mode,
            str(path),
            str(vocab),
            str(hidden),
            str(draft),
        ],
        check=True,
        capture_output=True,
        text=True,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=VOCAB)
    parser.add_argument("--hidden", type=int, default=HIDDEN)
    parser.add_argument("--draft-vocab", type=int, default=DRAFT_VOCAB)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None, help="JSON output file")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="verifier_weights_bench_"))
    ckpt = workdir / "kimi_k25_synthetic"
    try:
        start = dt.datetime.now(dt.UTC)
        build_checkpoint(ckpt, args.vocab, args.hidden)
        # Warm the page cache once so both loaders read from memory.
        for shard in sorted(ckpt.glob("*.safetensors")):
            with shard.open("rb") as file:
                while file.read(1 << 26):
                    pass
        runs: dict[str, list[dict]] = {"upstream": [], "ours": []}
        for _ in range(args.repeats):
            for mode in ("upstream", "ours"):
                runs[mode].append(
                    run_child(mode, ckpt, args.vocab, args.hidden, args.draft_vocab)
                )
        summary = {}
        for mode, results in runs.items():
            summary[mode] = {
                "wall_s_median": statistics.median(r["wall_s"] for r in results),
                "peak_rss_mib_median": statistics.median(
                    r["peak_rss_mib"] for r in results
                ),
                "peak_rss_over_baseline_mib_median": statistics.median(
                    r["peak_rss_mib"] - r["baseline_rss_mib"] for r in results
                ),
                "load_only_wall_s_median": statistics.median(
                    r["load_only_wall_s"] for r in results
                ),
                "peak_virtual_mib_median": statistics.median(
                    r["peak_virtual_mib"] for r in results
                ),
                "runs": results,
            }
        up, ours = summary["upstream"], summary["ours"]
        result = {
            "benchmark": "verifier_weights",
            "date_utc": start.isoformat(timespec="seconds"),
            "hardware": {
                "cpu_model": cpu_model(),
                "cpus": os.cpu_count(),
                "accelerator": "none (CPU)",
                "platform": platform.platform(),
                "python": platform.python_version(),
            },
            "checkpoint": {
                "layout": "Kimi-K2.5 Hub (language_model.*), 3 shards; embedding "
                "in shard 1, head + final norm in shard 3",
                "vocab_size": args.vocab,
                "hidden_size": args.hidden,
                "dtype": "bfloat16",
                "bytes_per_tensor": args.vocab * args.hidden * 2,
                "draft_vocab_size": args.draft_vocab,
                "page_cache": "warm",
            },
            "what_is_loaded": "embedding (full), head rows of the draft vocabulary, "
            "final norm, into the draft's parameters (allocated untouched before "
            "the timed region): upstream loads then copies (load_only_wall_s "
            "excludes its copy), ours reads straight into them (out=), as the "
            "patched call site does (load_only_wall_s == wall_s)",
            "config_prewarmed": "both children read the verifier config (as training "
            "does before loading weights) before the timed region",
            "note": "safetensors >= 0.4 get_tensor maps the file lazily, so "
            "upstream's full-head load costs mapped (virtual) memory and RSS only "
            "for the pages indexing touches; peak RSS counts file-backed pages "
            "touched while mapped.",
            "repeats": args.repeats,
            "upstream_0_9_0_load_model_layers": up,
            "ours_resolve_and_load": ours,
            "outputs_match": all(
                a["checksum"] == b["checksum"]
                for a, b in zip(runs["upstream"], runs["ours"], strict=True)
            ),
            "ratios_ours_over_upstream": {
                "peak_rss": ours["peak_rss_mib_median"] / up["peak_rss_mib_median"],
                "peak_rss_over_baseline": ours["peak_rss_over_baseline_mib_median"]
                / up["peak_rss_over_baseline_mib_median"],
                "wall_time_load_and_copy": ours["wall_s_median"] / up["wall_s_median"],
                "wall_time_load_only": ours["load_only_wall_s_median"]
                / up["load_only_wall_s_median"],
                "peak_virtual_memory": ours["peak_virtual_mib_median"]
                / up["peak_virtual_mib_median"],
            },
        }
        text = json.dumps(result, indent=2)
        print(text)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(text + "\n")
    finally:
        if not args.keep:
            shutil.rmtree(ckpt, ignore_errors=True)
            if args.workdir is None:
                shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
