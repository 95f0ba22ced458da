import importlib.metadata
import sys

import pytest

import speculators.version
from speculators import SpeculatorModelConfig
from speculators.utils.package_version import (
    installing_distribution,
    speculators_version,
)


def test_version_comes_from_the_package_module():
    assert speculators_version() == speculators.version.version


def test_config_default_records_running_version():
    field = SpeculatorModelConfig.model_fields["speculators_version"]
    assert field.default == speculators.version.version


def test_falls_back_to_distribution_metadata(monkeypatch):
    # A source checkout has no generated version module: the metadata answers.
    monkeypatch.setitem(sys.modules, "speculators.version", None)
    try:
        expected = importlib.metadata.version("speculators")
    except importlib.metadata.PackageNotFoundError:
        with pytest.raises(importlib.metadata.PackageNotFoundError):
            speculators_version()
    else:
        assert speculators_version() == expected


def test_config_serializes_with_versions():
    from speculators.models import Eagle3SpeculatorConfig  # noqa: PLC0415

    data = Eagle3SpeculatorConfig().to_dict()
    assert data["speculators_version"] == speculators.version.version
    assert data["transformers_version"] == importlib.metadata.version("transformers")


def _redistribution(root, name="speculators-redist", version="1.2.3"):
    """A distribution on ``sys.path`` that claims the ``speculators`` package."""
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        "Summary: speculators with local fixes\n"
    )
    (info / "top_level.txt").write_text("speculators\n")


def test_installing_distribution_names_a_redistribution(tmp_path, monkeypatch):
    _redistribution(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    dist = installing_distribution()
    assert dist is not None
    assert (dist.metadata["Name"], dist.version) == ("speculators-redist", "1.2.3")


def test_version_flag_prints_the_running_version(tmp_path, monkeypatch):
    from typer.testing import CliRunner  # noqa: PLC0415

    from speculators.cli import app  # noqa: PLC0415

    _redistribution(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"speculators version: {speculators.version.version}"
    assert lines[1] == (
        "installed by: speculators-redist 1.2.3 (speculators with local fixes)"
    )


def test_provenance_records_the_running_version():
    from speculators.provenance import package_versions, pkg_version  # noqa: PLC0415

    assert pkg_version("speculators") == speculators.version.version
    assert f"# speculators: {speculators.version.version}" in package_versions()
