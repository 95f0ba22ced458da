"""Building a training split: reading its samples' lengths (unit 0000).

    python benchmarks/approx_lengths.py [--rows 100000 ...] [--repeats 5] [--json OUT]

A prepared dataset of ``rows`` rows (saved in torch format, as `prepare-data`
saves it), split 90/10 as `--train-data-ratio 0.9` does. Alternating, in this
process: upstream 0.9.0's `ArrowDataset._compute_approx_lengths` expression
(``list(column)``: one formatted read per row; the baseline) and the installed
`ArrowDataset`'s own method, each on the train split. Medians and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from bench_common import save_cpu_report  # this directory
from datasets import Dataset
from speculators.train.data import ArrowDataset


def prepared_dataset(folder: Path, rows: int) -> Path:
    """A prepared dataset's columns (lengths 16-527), in torch format."""
    lengths = [16 + (i * 7919) % 512 for i in range(rows)]
    ds = Dataset.from_dict(
        {
            "input_ids": [[1] * n for n in lengths],
            "loss_mask": [[1] * n for n in lengths],
            "seq_len": lengths,
        }
    )
    ds.set_format("torch")
    path = folder / f"rows{rows}"
    ds.save_to_disk(str(path))
    (path / "hidden_states").mkdir()
    return path


def upstream_lengths(split: ArrowDataset) -> list[int]:
    """speculators 0.9.0, `ArrowDataset._compute_approx_lengths`."""
    return list(split.data.with_format(None)["seq_len"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for rows in args.rows:
            path = prepared_dataset(Path(scratch), rows)
            split = ArrowDataset(
                max_len=4096, datapath=path, on_missing="skip", train_ratio=0.9
            )
            times: dict[str, list[float]] = {"upstream 0.9.0": [], "ours": []}
            for _ in range(args.repeats):
                for name, read in (
                    ("upstream 0.9.0", upstream_lengths),
                    ("ours", ArrowDataset._compute_approx_lengths),
                ):
                    t0 = time.perf_counter()
                    lengths = read(split)
                    times[name].append(time.perf_counter() - t0)
                    assert lengths == split.approx_lengths, name
            base = statistics.median(times["upstream 0.9.0"])
            ours = statistics.median(times["ours"])
            results[str(rows)] = {
                "train_split_rows": len(split),
                "upstream_median_s": round(base, 4),
                "ours_median_s": round(ours, 5),
                "speedup": round(base / ours, 1),
            }
            print(
                f"{rows:>9} rows: upstream {base:8.3f} s  ours {ours:8.4f} s  "
                f"{base / ours:7.1f}x"
            )
    save_cpu_report("approx_lengths", args.repeats, results, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
