"""`speculators --version` and `--help` against the full `import speculators`.

    python benchmarks/cli_startup.py [--repeats 7] [--json OUT]

Alternating, in fresh processes: the console script with `--version` and with
`--help` (it enters through speculators_kimi.console, which answers both without
importing the package), and `python -c "import speculators"` (what upstream's
package costs: every model registered, the schemas reloaded; the baseline).
Wall time per run, medians, and each command as a ratio to the full import.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_common import save_cpu_report  # this directory


def commands() -> dict[str, list[str]]:
    script = shutil.which("speculators") or str(
        Path(sys.executable).parent / "speculators"
    )
    return {
        "import speculators": [sys.executable, "-c", "import speculators"],
        "speculators --version": [script, "--version"],
        "speculators --help": [script, "--help"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    env = dict(os.environ, COLUMNS="100")
    times: dict[str, list[float]] = {name: [] for name in commands()}
    for _ in range(args.repeats):
        for name, cmd in commands().items():
            t0 = time.perf_counter()
            subprocess.run(cmd, env=env, check=True, capture_output=True)
            times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["import speculators"])
    rows = {
        name: {
            "median_s": round(statistics.median(ts), 3),
            "ratio_to_import": round(statistics.median(ts) / base, 3),
            "runs_s": [round(t, 3) for t in ts],
        }
        for name, ts in times.items()
    }
    for name, row in rows.items():
        print(f"{name:24} {row['median_s']:7.3f} s  {row['ratio_to_import']:.3f}x")
    save_cpu_report("cli_startup", args.repeats, rows, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
