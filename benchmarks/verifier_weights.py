"""Benchmark: verifier weight loading, ours (units 0005-0007) vs upstream 0.9.0.

Builds a synthetic sharded checkpoint in the Kimi-K2.5 Hub layout with a
Kimi-K2.5-sized embedding and head (vocab 163840, hidden 7168, bf16: ~2.3 GB per
tensor; embedding and head in different shards). Then, each in a fresh
subprocess and alternating, it times what training runs: the draft's
``load_verifier_weights()`` (``DraftVocabMixin._load_verifier_weights``) on the
vocabulary part of an EAGLE-3 draft with a 32k draft vocabulary, built by that
version's own ``_init_vocab`` (float32 parameters filled with NaN) plus a final
norm:

* ``upstream``: pristine 0.9.0, extracted from the pinned, hash-checked sdist:
  ``load_model_layers`` (memory-mapped), a full ``isnan`` pass over the
  parameters, ``head[t2d]``, clones and ``load_state_dict`` copies;
* ``ours``: the installed, patched copy: ``resolve_verifier_weights`` +
  ``load_verifier_tensors(head_rows=t2d, out=<parameters>)`` -- ``safetensors``
  slices read in row blocks straight into the parameters (selected head rows
  only), NaN/inf checked block by block -- after an early-exit NaN test of the
  parameters.

Reports wall time; anonymous memory (``RssAnon``: heap and temporaries, what a
loader really costs), sampled every 2 ms during the call, its peak and the
loader's own peak (peak minus before the call); and peak RSS (``VmHWM``, which
also counts file pages of memory-mapped shards) -- of each, and their ratios
(ours / upstream), as JSON.
The checkpoint is deleted afterwards unless ``--keep`` (then reused).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_common import (  # this directory (run as a script)
    KIMI_HIDDEN,
    KIMI_VOCAB,
    cpu_model,
    kimi_size_verifier,
    pristine_upstream,
)

from speculators_kimi.cli_args import save_json_report

DRAFT_VOCAB = 32768


CHILD = r"""
import json, sys, threading, time
from types import SimpleNamespace

import torch
from loguru import logger
from torch import nn
from transformers import AutoConfig
from transformers.models.llama.modeling_llama import LlamaRMSNorm

import speculators.model
from speculators.model import DraftVocabMixin

mode, path = sys.argv[1], sys.argv[2]
vocab, hidden, draft = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
logger.remove()
assert speculators.model.__file__.startswith(sys.argv[6]), speculators.model.__file__


def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


class AnonSampler(threading.Thread):
    # Peak RssAnon while the timed call runs (RssAnon has no high-water mark).

    def __init__(self):
        super().__init__(daemon=True)
        self.peak = status("RssAnon")
        self.done = threading.Event()

    def run(self):
        while not self.done.wait(0.002):
            self.peak = max(self.peak, status("RssAnon"))

    def stop(self):
        self.done.set()
        self.join()
        self.peak = max(self.peak, status("RssAnon"))
        return self.peak


class Draft(DraftVocabMixin):
    # The vocabulary part of an EAGLE-3 draft, built by the version's own
    # _init_vocab: float32 parameters filled with NaN ("not loaded yet").
    def __init__(self, config):
        nn.Module.__init__(self)
        self.config = config
        self._init_vocab(config)
        self.verifier_norm = LlamaRMSNorm(hidden)


config = SimpleNamespace(
    transformer_layer_config=SimpleNamespace(
        vocab_size=vocab, hidden_size=hidden, pad_token_id=None
    ),
    draft_vocab_size=draft,
    speculators_config=SimpleNamespace(
        verifier=SimpleNamespace(name_or_path=path, weights=None)
    ),
)
# Training has read the verifier's config before it loads weights: do the same so
# neither side pays transformers' lazy config imports inside the timed region.
AutoConfig.from_pretrained(path)
model = Draft(config)
t2d = torch.zeros(vocab, dtype=torch.bool)
t2d[torch.randperm(vocab, generator=torch.Generator().manual_seed(0))[:draft]] = True
d2t = torch.nonzero(t2d).flatten() - torch.arange(draft)
model.load_vocab_mappings(t2d, d2t)
# VmHWM/VmRSS are per address space (reset at exec); ru_maxrss is not (Linux
# carries the parent's high-water mark across fork + exec).
base = status("VmRSS")
anon_base = status("RssAnon")
sampler = AnonSampler()
sampler.start()
start = time.perf_counter()
model.load_verifier_weights()
elapsed = time.perf_counter() - start
anon_peak = sampler.stop()
peak = status("VmHWM")
print(json.dumps({
    "wall_s": elapsed,
    "peak_rss_mib": peak,
    "rss_before_load_mib": base,
    "peak_rss_anon_mib": anon_peak,
    "rss_anon_before_load_mib": anon_base,
    "peak_virtual_mib": status("VmPeak"),
    "param_dtype": str(model.embed_tokens.weight.dtype),
    "head_shape": list(model.verifier_lm_head.weight.shape),
    "checksum": [
        float(model.embed_tokens.weight.double().sum()),
        float(model.verifier_lm_head.weight.double().sum()),
        float(model.lm_head.weight.double().sum()),
        float(model.verifier_norm.weight.double().sum()),
    ],
}))
"""


def ours_src() -> Path:
    """``src`` of the installed, patched upstream (speculators-kimi's vendored copy)."""
    spec = importlib.util.find_spec("speculators")
    if spec is None or spec.origin is None:
        raise SystemExit("speculators is not installed: pip install -e . first")
    return Path(spec.origin).parents[1]


def run_child(
    mode: str, src: Path, path: Path, vocab: int, hidden: int, draft: int
) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(src), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
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
            str(src),
        ],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


#: How the numbers are taken, written into the result as is.
_METHOD = {
    "what_is_timed": "DraftVocabMixin.load_verifier_weights() of each "
    "version (upstream: pristine 0.9.0 from the pinned sdist; ours: the "
    "installed, patched copy) on the vocabulary part of an EAGLE-3 draft "
    "built by that version's own _init_vocab (float32 parameters filled "
    "with NaN, as training builds them) plus a final norm, with a 32k "
    "draft vocabulary: embedding, selected head rows into lm_head and "
    "verifier_lm_head, final norm",
    "memory": "peak_rss_anon is the child's peak RssAnon during the call "
    "(anonymous memory: the draft's parameters, identical on both sides, "
    "plus the loader's temporaries and copies), sampled every 2 ms; "
    "loader_peak_rss_anon is that minus RssAnon just before the call: what "
    "the loading itself allocates. peak_rss is VmHWM, which also counts "
    "file-backed pages of memory-mapped shards (page cache, reclaimable); "
    "loader_peak_rss is VmHWM minus VmRSS before the call",
    "config_prewarmed": "both children read the verifier config with "
    "AutoConfig (as training does before loading weights) before the "
    "timed region; ours re-reads it inside (resolution)",
}


def _medians(results: list[dict]) -> dict:
    """One side's medians over its runs (MiB, seconds), and the runs."""
    return {
        "wall_s_median": statistics.median(r["wall_s"] for r in results),
        "peak_rss_mib_median": statistics.median(r["peak_rss_mib"] for r in results),
        "loader_peak_rss_mib_median": statistics.median(
            r["peak_rss_mib"] - r["rss_before_load_mib"] for r in results
        ),
        "peak_rss_anon_mib_median": statistics.median(
            r["peak_rss_anon_mib"] for r in results
        ),
        "loader_peak_rss_anon_mib_median": statistics.median(
            r["peak_rss_anon_mib"] - r["rss_anon_before_load_mib"] for r in results
        ),
        "peak_virtual_mib_median": statistics.median(
            r["peak_virtual_mib"] for r in results
        ),
        "runs": results,
    }


def _ratios(ours: dict, up: dict) -> dict[str, float]:
    """Ours over upstream, median against median."""
    return {
        "wall_time": ours["wall_s_median"] / up["wall_s_median"],
        "peak_rss": ours["peak_rss_mib_median"] / up["peak_rss_mib_median"],
        "loader_peak_rss": ours["loader_peak_rss_mib_median"]
        / up["loader_peak_rss_mib_median"],
        "peak_rss_anon": ours["peak_rss_anon_mib_median"]
        / up["peak_rss_anon_mib_median"],
        "loader_peak_rss_anon": ours["loader_peak_rss_anon_mib_median"]
        / max(up["loader_peak_rss_anon_mib_median"], 1e-9),
        "peak_virtual_memory": ours["peak_virtual_mib_median"]
        / up["peak_virtual_mib_median"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=KIMI_VOCAB)
    parser.add_argument("--hidden", type=int, default=KIMI_HIDDEN)
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
        if not (ckpt / "model.safetensors.index.json").is_file():
            kimi_size_verifier(ckpt, args.vocab, args.hidden)  # else: kept (--keep)
        # Warm the page cache once so both loaders read from memory.
        for shard in sorted(ckpt.glob("*.safetensors")):
            with shard.open("rb") as file:
                while file.read(1 << 26):
                    pass
        sources = {"upstream": pristine_upstream(workdir), "ours": ours_src()}
        runs: dict[str, list[dict]] = {"upstream": [], "ours": []}
        for _ in range(args.repeats):
            for mode in ("upstream", "ours"):
                runs[mode].append(
                    run_child(
                        mode,
                        sources[mode],
                        ckpt,
                        args.vocab,
                        args.hidden,
                        args.draft_vocab,
                    )
                )
        summary = {mode: _medians(results) for mode, results in runs.items()}
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
            **_METHOD,
            "repeats": args.repeats,
            "upstream_0_9_0": up,
            "ours": ours,
            "outputs_match": all(
                a["checksum"] == b["checksum"]
                for a, b in zip(runs["upstream"], runs["ours"], strict=True)
            ),
            "ratios_ours_over_upstream": _ratios(ours, up),
        }
        save_json_report(result, args.out)
    finally:
        shutil.rmtree(workdir / "upstream", ignore_errors=True)
        if not args.keep:
            shutil.rmtree(ckpt, ignore_errors=True)
            if args.workdir is None:
                shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
