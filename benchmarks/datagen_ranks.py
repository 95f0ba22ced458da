"""Hidden-state generation in one process against ``torchrun`` with N ranks.

    python benchmarks/datagen_ranks.py --work DIR [--ranks 2] [--samples 64]
        [--repeats 2] [--json OUT]

A tiny Llama verifier (widened so the decoder, not process start-up, dominates)
and its prepared dataset are built once; then, alternating, the same
``generate-hidden-states`` command runs as one process and under ``torchrun
--nproc_per_node N`` into fresh directories, and the outputs are compared byte
for byte. Each run's wall time includes interpreter start-up and model loading
(what a user waits for). On a CPU box the ranks share its cores: torch's threads
per process are set to cores / N so both sides use the same cores, and the
ratio shows the overhead of splitting, not the gain a GPU per rank gives.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench_common import cpu_model  # this directory

from speculators_kimi.cli_args import save_json_report

ARGS = ["--batch-size", "8", "--dtype", "float32", "--no-progress", "--device", "cpu"]


def _snapshot(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def _timed(cmd: list[str], threads: int) -> float:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, capture_output=True, text=True)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    from speculators_kimi.datagen.fixture import build_dataset
    from speculators_kimi.tiny_verifier import TinyVerifierSpec, build_verifier

    spec = TinyVerifierSpec(
        hidden_size=512,
        intermediate_size=1536,
        num_layers=8,
        num_heads=8,
        num_kv_heads=4,
        num_samples=args.samples,
        min_turn_words=40,
        max_turn_words=120,
    )
    verifier = build_verifier(spec, args.work / "verifier")
    data = build_dataset(spec, verifier, args.work / "data")
    cores = os.cpu_count() or 1
    base = [sys.executable, "-m", "speculators_kimi.datagen", "--verifier"]
    base += [str(verifier), "--data-path", str(data), *ARGS]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node"]
    torchrun += [str(args.ranks), "-m", "speculators_kimi.datagen"]
    torchrun += ["--verifier", str(verifier), "--data-path", str(data), *ARGS]

    one: list[float] = []
    many: list[float] = []
    same = True
    for r in range(args.repeats):
        a, b = args.work / f"one-{r}", args.work / f"ranks-{r}"
        for d in (a, b):
            shutil.rmtree(d, ignore_errors=True)
        one.append(_timed([*base, "--output-dir", str(a)], cores))
        threads = max(1, cores // args.ranks)
        many.append(_timed([*torchrun, "--output-dir", str(b)], threads))
        same = same and _snapshot(a) == _snapshot(b)

    result = {
        "benchmark": "datagen_ranks",
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": f"cpu: {cpu_model()}, {cores} cores shared by every rank",
        "command": " ".join(["python", *sys.argv]),
        "samples": args.samples,
        "ranks": args.ranks,
        "one_process_seconds": [round(t, 2) for t in one],
        "torchrun_seconds": [round(t, 2) for t in many],
        "speedup_best_of": round(min(one) / min(many), 3),
        "same_bytes": same,
    }
    save_json_report(result, args.json)
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
