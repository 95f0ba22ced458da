import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import ROOT, clean_copy, pinned_sdist


@pytest.fixture(scope="session")
def upstream_sdist() -> Path:
    return pinned_sdist()


@pytest.fixture
def project_copy(tmp_path: Path) -> Path:
    """A clean copy of the project (as a fresh clone would have it)."""
    return clean_copy(tmp_path / "project")


@pytest.fixture(scope="session")
def project_root() -> Path:
    return ROOT
