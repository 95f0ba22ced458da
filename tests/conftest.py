from pathlib import Path

import pytest
from helpers import ROOT, clean_copy, demo_command, json_report, pinned_sdist, run

#: Fixtures that take well over 20 s to build: a test that uses one is ``slow``
#: (the fast loop, ``pytest -m "not slow"``, leaves it to CI).
HEAVY_FIXTURES = {"trained_demo", "trained_mla_demo", "release"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HEAVY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


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


@pytest.fixture(scope="session")
def trained_demo(tmp_path_factory) -> dict:
    """The demo CLI run once per session (80 conversations, 3 epochs): its report
    (with the acceptance of the trained and untrained drafts) and, under
    ``"stdout"``, what it printed. Tests that rerun it work on a copy of ``out``."""
    out = tmp_path_factory.mktemp("trained-demo") / "demo"
    stdout = run(demo_command(out), timeout=1200).stdout
    return {**json_report(stdout), "stdout": stdout}


@pytest.fixture(scope="session")
def trained_mla_demo(tmp_path_factory) -> dict:
    """A small demo with an MLA draft (`--draft-arch deepseek_v3`: DeepSeek-V3
    latent attention layers; 40 conversations, 1 epoch): its report."""
    from speculators_kimi.demo import DemoSettings, run_demo

    out = tmp_path_factory.mktemp("trained-mla-demo")
    return run_demo(
        DemoSettings(out=out, num_samples=40, epochs=1, draft_arch="deepseek_v3")
    )
