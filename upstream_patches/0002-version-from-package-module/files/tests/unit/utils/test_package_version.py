import importlib.metadata
import sys

import pytest

import speculators.version
from speculators import SpeculatorModelConfig
from speculators.utils.package_version import speculators_version


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
