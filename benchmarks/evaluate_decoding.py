"""Benchmark: `speculators-kimi evaluate`'s speculative decoding vs plain greedy.

The demo's verifier and draft (``speculators-kimi demo``; ``--demo DIR`` reuses a
finished one, else it is run into a temporary directory), the held-out prompts.
In one process, alternating per prompt and repeated ``--repeats`` times:

* ``greedy``: the verifier's own greedy decoding, one token per forward, KV cache
  (``speculators_kimi.evaluate.decode.greedy_generate``: what the lossless check
  compares with);
* ``speculative``: EAGLE-3 speculative decoding with the trained draft, ``K``
  draft tokens per round (``speculative_generate``).

Reports median wall time of each over all prompts, their ratio (speculative /
greedy), acceptance length, verifier forwards, whether every output was equal,
and ``RssAnon`` (anonymous memory) after the runs, as JSON, with the CPU named.
On the tiny demo verifier a verifier forward is about as cheap as a draft step,
so the ratio shows the evaluator's own overhead, not a serving speedup.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from bench_common import cpu_model, process_memory  # this directory (run as a script)

from speculators_kimi.cli_args import save_json_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demo", type=Path, default=None, help="a finished demo dir")
    parser.add_argument("-k", "--num-speculative-tokens", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    from speculators_kimi.demo import DemoSettings, run_demo
    from speculators_kimi.evaluate import DraftRunner, dataset_prompts, load_session
    from speculators_kimi.evaluate.decode import (
        acceptance_length,
        greedy_generate,
        speculative_generate,
    )

    torch.set_num_threads(max(1, torch.get_num_threads()))
    with tempfile.TemporaryDirectory() as tmp:
        out = args.demo or Path(tmp) / "demo"
        report = run_demo(DemoSettings(out=out))
        session = load_session(
            report["checkpoint"], report["verifier"], dtype="float32", device="cpu"
        )
        prompts = dataset_prompts(report["data"])
        runner = DraftRunner(session.draft, session.verifier.device)
        times: dict[str, list[float]] = {"greedy": [], "speculative": []}
        accepted: list[int] = []
        equal = True
        spec_forwards = greedy_forwards = 0
        for repeat in range(args.repeats):
            total = {"greedy": 0.0, "speculative": 0.0}
            for prompt in prompts:
                t0 = time.perf_counter()
                plain = greedy_generate(
                    session.verifier,
                    prompt.token_ids,
                    max_new_tokens=args.max_new_tokens,
                )
                total["greedy"] += time.perf_counter() - t0
                t0 = time.perf_counter()
                spec = speculative_generate(
                    session.verifier,
                    runner,
                    prompt.token_ids,
                    num_speculative_tokens=args.num_speculative_tokens,
                    max_new_tokens=args.max_new_tokens,
                )
                total["speculative"] += time.perf_counter() - t0
                equal &= spec.tokens == plain.tokens
                if repeat == 0:
                    accepted += spec.accepted
                    spec_forwards += spec.verifier_forwards
                    greedy_forwards += plain.verifier_forwards
            for name, seconds in total.items():
                times[name].append(seconds)
    median = {name: statistics.median(t) for name, t in times.items()}
    result = {
        "benchmark": "evaluate_decoding",
        "date": dt.date.today().isoformat(),
        "device": f"cpu: {cpu_model()}, {torch.get_num_threads()} threads",
        "torch": torch.__version__,
        "prompts": len(prompts),
        "num_speculative_tokens": args.num_speculative_tokens,
        "max_new_tokens": args.max_new_tokens,
        "repeats": args.repeats,
        "median_s": {k: round(v, 3) for k, v in median.items()},
        "ratio_speculative_over_greedy": round(
            median["speculative"] / median["greedy"], 3
        ),
        "mean_acceptance_length": round(acceptance_length(accepted), 3),
        "verifier_forwards": {"greedy": greedy_forwards, "speculative": spec_forwards},
        "outputs_equal": equal,
        "memory_after_runs": process_memory(),
    }
    save_json_report(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
