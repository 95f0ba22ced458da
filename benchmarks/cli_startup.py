"""`speculators --version`, `--help` and `import speculators` against upstream's import.

    python benchmarks/cli_startup.py [--repeats 7] [--json OUT]

Alternating, in fresh processes: `python -c "import speculators"` of pristine
upstream 0.9.0 (from the pinned sdist, first on `PYTHONPATH`: the baseline) and of
this install (every model registered, the schemas reloaded, as upstream; DFlash's
block mask compiled on first use, unit 0040), and the console script with
`--version` and with `--help` (it enters through speculators_kimi.console, which
answers both without importing the package). Wall and CPU time (user + system) per
run, medians, and each command as a ratio to upstream's import.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_common import pristine_upstream, save_cpu_report  # this directory

UPSTREAM = "import speculators (upstream 0.9.0)"


def commands(upstream_src: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Each command line and its environment; upstream's import first."""
    script = shutil.which("speculators") or str(
        Path(sys.executable).parent / "speculators"
    )
    env = dict(os.environ, COLUMNS="100")
    upstream = dict(env, PYTHONPATH=str(upstream_src))
    import_line = [sys.executable, "-c", "import speculators"]
    return {
        UPSTREAM: (import_line, upstream),
        "import speculators": (import_line, env),
        "speculators --version": ([script, "--version"], env),
        "speculators --help": ([script, "--help"], env),
    }


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cli-startup-") as work:
        runs = commands(pristine_upstream(Path(work)))
        wall: dict[str, list[float]] = {name: [] for name in runs}
        cpu: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.repeats):
            for name, (cmd, env) in runs.items():
                c0, t0 = children_cpu(), time.perf_counter()
                subprocess.run(cmd, env=env, check=True, capture_output=True)
                wall[name].append(time.perf_counter() - t0)
                cpu[name].append(children_cpu() - c0)
    wall_median = {name: statistics.median(ts) for name, ts in wall.items()}
    cpu_median = {name: statistics.median(ts) for name, ts in cpu.items()}
    rows = {
        name: {
            "median_s": round(wall_median[name], 3),
            "median_cpu_s": round(cpu_median[name], 3),
            "ratio_to_upstream_import": round(
                wall_median[name] / wall_median[UPSTREAM], 3
            ),
            "cpu_ratio_to_upstream_import": round(
                cpu_median[name] / cpu_median[UPSTREAM], 3
            ),
            "runs_s": [round(t, 3) for t in wall[name]],
            "runs_cpu_s": [round(t, 3) for t in cpu[name]],
        }
        for name in runs
    }
    for name, row in rows.items():
        wall_s, wall_x = row["median_s"], row["ratio_to_upstream_import"]
        cpu_s, cpu_x = row["median_cpu_s"], row["cpu_ratio_to_upstream_import"]
        print(f"{name:36} {wall_s:7.3f} s ({wall_x:.3f}x)", end="  ")
        print(f"cpu {cpu_s:7.3f} s ({cpu_x:.3f}x)")
    save_cpu_report("cli_startup", args.repeats, rows, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
