"""What the installed build says about itself, and the upstream-conflict warning."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import speculators
import speculators.version
from helpers import ROOT, run
from vendorlib.pin import load_pin, load_series

import speculators_kimi


def test_patches_and_pin_match_the_series():
    assert speculators_kimi.UPSTREAM_VERSION == load_pin(ROOT).version == "0.9.0"
    assert list(speculators_kimi.PATCHES) == [u.name for u in load_series(ROOT)]


def test_speculators_version_stays_upstreams():
    assert speculators.version.version == speculators_kimi.UPSTREAM_VERSION
    # Upstream 0.9.0 defines no `speculators.__version__`; we add none either.
    assert getattr(speculators, "__version__", None) in (None, "0.9.0")


def test_upstream_cli_version_names_this_build():
    bin_dir = Path(sys.executable).parent
    proc = run([str(bin_dir / "speculators"), "--version"])
    lines = proc.stdout.splitlines()
    assert lines[0] == "speculators version: 0.9.0"
    assert lines[1].startswith(
        f"installed by: speculators-kimi {speculators_kimi.__version__}"
    )
    assert "Traceback" not in proc.stderr


def test_checkpoint_provenance_records_the_version():
    from speculators.provenance import pkg_version

    assert pkg_version("speculators") == "0.9.0"


def test_cli_version_prints_pin_and_units():
    out = run([sys.executable, "-m", "speculators_kimi.cli", "--version"]).stdout
    assert "upstream speculators 0.9.0" in out
    for name in speculators_kimi.PATCHES:
        assert f"  {name}" in out


@pytest.fixture(scope="module")
def upstream_dist_dir(tmp_path_factory) -> Path:
    """Upstream's own `speculators` distribution, really installed (no deps)."""
    target = tmp_path_factory.mktemp("upstream-dist")
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            "speculators==0.9.0",
        ],
        timeout=600,
    )
    return target


def test_warns_once_when_upstream_distribution_is_installed(upstream_dist_dir):
    code = (
        "import warnings\nwarnings.simplefilter('always')\n"
        "import speculators_kimi\n"
        "from speculators_kimi.install_check import warn_if_upstream_installed\n"
        "assert warn_if_upstream_installed()\n"  # still detected, not warned twice
    )
    proc = run([sys.executable, "-c", code], env={"PYTHONPATH": str(upstream_dist_dir)})
    assert proc.stderr.count("UpstreamConflictWarning") == 1
    assert "pip uninstall -y speculators" in proc.stderr
    assert "pip install --force-reinstall --no-deps speculators-kimi" in proc.stderr


def test_no_warning_without_upstream_distribution():
    proc = run([sys.executable, "-W", "always", "-c", "import speculators_kimi"])
    assert "UpstreamConflictWarning" not in proc.stderr
