"""Smoke run of the whole-draft training-step benchmark on CPU (interpreter)."""

import json
import sys
from pathlib import Path

from helpers import ROOT, run


def test_quick_run_compares_backends_on_the_same_loss(tmp_path: Path):
    out = tmp_path / "step.json"
    run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "draft_train_step.py"),
            "--quick",
            "--rounds",
            "1",
            "--out",
            str(out),
        ],
        env={"TRITON_INTERPRET": "1"},
        timeout=600,
    )
    result = json.loads(out.read_text())
    assert result["interpreter_timings"] is True  # never a performance figure
    assert "CPU" in result["device"]
    got = result["results"]
    assert set(got) == {"sdpa", "triton"}
    assert abs(got["triton"]["loss"] - got["sdpa"]["loss"]) < 1e-5
    assert result["speedup_vs_baseline"] > 0
