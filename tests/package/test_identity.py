"""What the installed build says about itself, and the upstream-conflict warning."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import sys
from base64 import urlsafe_b64encode
from pathlib import Path

import pytest
import speculators
import speculators.version
from helpers import ROOT, run
from vendorlib.pin import load_pin, load_series

import speculators_kimi
from speculators_kimi.install_check import (
    conflict_message,
    install_source,
    install_state,
)


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
    assert "Upstream `speculators` 0.9.0 is installed beside" in proc.stderr
    assert "pip uninstall -y speculators\n" in proc.stderr
    # reinstalled from where it came: this test environment's editable clone
    source = install_source(importlib.metadata.distribution("speculators-kimi"))
    assert source.startswith("-e ")
    assert f"pip install --force-reinstall --no-deps {source}\n" in proc.stderr


def _record_line(name: str, data: bytes) -> str:
    digest = urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def test_our_speculators_files_replaced_or_deleted_are_named(tmp_path):
    """After `pip install speculators` over ours, or `pip uninstall speculators`
    beside it, the package is not ours, though no distribution says so."""
    site = tmp_path / "site"
    (site / "speculators").mkdir(parents=True)
    info = site / "speculators_kimi-0.1.0.dist-info"
    info.mkdir()
    ours = {f"speculators/{n}.py": f"# ours {n}\n".encode() for n in "abc"}
    (site / "speculators/a.py").write_bytes(ours["speculators/a.py"])
    (site / "speculators/b.py").write_bytes(b"# upstream's b\n")  # c.py: deleted
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: speculators-kimi\n")
    (info / "RECORD").write_text(
        "\n".join(_record_line(n, d) for n, d in ours.items())
        + "\nspeculators_kimi-0.1.0.dist-info/RECORD,,\n"
    )
    wheel = tmp_path / "a dir" / "speculators_kimi-0.1.0-py3-none-any.whl"
    (info / "direct_url.json").write_text(
        json.dumps({"url": wheel.as_uri(), "archive_info": {}})
    )
    state = install_state(importlib.metadata.Distribution.at(info))
    assert state.missing == ["speculators/c.py"]
    assert state.changed == ["speculators/b.py"]
    assert state.source == str(wheel)
    message = conflict_message(state)
    assert (
        "Of the `speculators` files `speculators-kimi` installed, 1 are gone and 1 "
        "hold other code (e.g. speculators/c.py, speculators/b.py)" in message
    )
    assert f"pip install --force-reinstall --no-deps {wheel}\n" in message

    (site / "speculators/b.py").write_bytes(ours["speculators/b.py"])
    (site / "speculators/c.py").write_bytes(ours["speculators/c.py"])
    (info / "direct_url.json").unlink()  # installed from the index
    state = install_state(importlib.metadata.Distribution.at(info))
    assert not state.files_replaced and state.source == "speculators-kimi"


def test_no_warning_without_upstream_distribution():
    proc = run([sys.executable, "-W", "always", "-c", "import speculators_kimi"])
    assert "UpstreamConflictWarning" not in proc.stderr
