"""Smoke run of the verifier-weights benchmark at tiny sizes.

Both sides really run: pristine upstream 0.9.0 extracted from the pinned sdist, and
the installed patched copy, each through its own ``load_verifier_weights()``. Tiny
sizes make the timings meaningless; what is checked is that the benchmark still
measures what it says (same outputs, both versions found, ratios computed).
"""

import json
import sys
from pathlib import Path

import pytest
from helpers import ROOT, run


@pytest.mark.slow
def test_tiny_run_loads_identical_weights_with_both_versions(tmp_path: Path):
    out = tmp_path / "bench.json"
    run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "verifier_weights.py"),
            *("--vocab", "4096", "--hidden", "64", "--draft-vocab", "512"),
            *("--repeats", "1", "--workdir", str(tmp_path / "work"), "--out", str(out)),
        ],
        timeout=600,
    )
    result = json.loads(out.read_text())
    assert result["outputs_match"] is True
    for side in ("upstream_0_9_0", "ours"):
        (only,) = result[side]["runs"]
        assert only["param_dtype"] == "torch.float32"  # as training builds the draft
        assert only["head_shape"] == [512, 64]
        assert all(value == value for value in only["checksum"])  # loaded: no NaN
    ratios = result["ratios_ours_over_upstream"]
    assert set(ratios) >= {
        "wall_time",
        "peak_rss",
        "loader_peak_rss",
        "peak_rss_anon",
        "loader_peak_rss_anon",
    }
    for side in ("upstream_0_9_0", "ours"):
        (only,) = result[side]["runs"]
        # Anonymous memory holds at least the draft's float32 parameters.
        assert only["peak_rss_anon_mib"] >= only["rss_anon_before_load_mib"] > 0
    assert result["hardware"]["cpu_model"]
    assert not (tmp_path / "work" / "upstream").exists()  # pristine copy removed
