"""What `pyproject.toml` cannot declare statically: the vendored package and its needs.

The build backend (`tools/vendorlib/backend.py`) has materialized `.vendored/` (the
pinned upstream release plus our units) before setuptools runs this file; here it is
only read: its packages, upstream's Requires-Dist (minus the pin's drops) plus ours,
and the `_build_info.py` module written into the build directory.
"""

import sys
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tools"))

from vendorlib.build import (  # noqa: E402
    STAMP,
    build_info_text,
    upstream_dev_requirement,
    upstream_requirements,
    vendored_dir,
)
from vendorlib.pin import load_pin, load_series  # noqa: E402

# accelerate: big-model dispatch of verifiers (--device-map/--max-memory).
OUR_REQUIREMENTS = ['triton; sys_platform == "linux"', "accelerate>=1.0"]
#: Kimi-K2.5's tokenizer is tiktoken BPE (remote code that imports tiktoken).
KIMI_REQUIREMENTS = ["tiktoken>=0.7"]
# pytest-mock, pytest-asyncio and pillow: what upstream's own unit tests need (CI runs
# them against this install, see .ci/run); build and twine: the release checks.
TEST_REQUIREMENTS = [
    "pytest>=8",
    # -n auto --dist loadfile (pyproject.toml): every core, a file per worker.
    "pytest-xdist>=3.6",
    # The session's trained demos, built once across xdist workers (tests/conftest.py).
    "filelock>=3.9",
    "tomli-w>=1.0",
    "pytest-mock",
    "pytest-asyncio",
    "pillow",
    "build>=1.2",
    "twine>=6",
    # Kimi-style tiktoken tokenizers built by the data-preparation tests.
    *KIMI_REQUIREMENTS,
]

TREE = vendored_dir(ROOT)
if not (TREE / STAMP).is_file():
    sys.exit(
        f"{TREE}: missing. Build through the PEP 517 backend (`pip install .`, "
        "`python -m build`), which materializes it first; setup.py is not a command."
    )
PIN = load_pin(ROOT)
UNITS = [u.name for u in load_series(ROOT)]


class BuildPyWithBuildInfo(build_py):
    """build_py that also writes `speculators_kimi/_build_info.py` into build_lib."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "speculators_kimi" / "_build_info.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(build_info_text(PIN, UNITS))


# setuptools' build directory is one per vendored tree, so files a unit removed never
# linger in a wheel; its egg-info goes there too, not into the source tree (where it
# would shadow the installed metadata of code run from the repository root).
BUILD_BASE = Path("build") / (TREE / STAMP).read_text().split()[0][:16]
(ROOT / BUILD_BASE).mkdir(parents=True, exist_ok=True)
reqs = upstream_requirements(TREE, PIN)
# `tools/vendor check` and `pr` lint the units with upstream's own ruff and mypy, at
# the versions its dev extra pins (our code's lint is .pre-commit-config.yaml's).
TEST_REQUIREMENTS += [upstream_dev_requirement(TREE, t) for t in ("ruff", "mypy")]
src = TREE.relative_to(ROOT) / "src"
setup(
    packages=[
        *find_packages(str(ROOT / src), include=["speculators", "speculators.*"]),
        *find_packages(str(ROOT), include=["speculators_kimi", "speculators_kimi.*"]),
    ],
    package_dir={"speculators": str(src / "speculators")},
    package_data={"speculators": ["py.typed"], "speculators_kimi": ["data/*"]},
    install_requires=reqs.base + OUR_REQUIREMENTS,
    extras_require={
        **reqs.extras,
        "kimi": KIMI_REQUIREMENTS,
        "test": TEST_REQUIREMENTS,
    },
    cmdclass={"build_py": BuildPyWithBuildInfo},
    options={
        "build": {"build_base": str(BUILD_BASE)},
        "egg_info": {"egg_base": str(BUILD_BASE)},
    },
    license_files=[
        "LICENSE",
        f"{TREE.relative_to(ROOT)}/UPSTREAM-LICENSE",
        f"{TREE.relative_to(ROOT)}/NOTICE",
    ],
)
