"""Build hook: materialize the pinned upstream release plus our patch units.

Before setuptools collects packages, `tools/vendorlib` downloads (or takes from
SPECULATORS_KIMI_UPSTREAM_SDIST) the pinned `speculators` sdist, checks its sha256,
applies `upstream_patches/series` into `.vendored/`, and reports upstream's
Requires-Dist and console scripts. Any failure stops the build with its cause.
"""

import shutil
import sys
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tools"))

from vendorlib import VendorError  # noqa: E402
from vendorlib.build import (  # noqa: E402
    ensure_vendored,
    upstream_console_scripts,
    upstream_requirements,
    write_build_info,
    write_notice,
)
from vendorlib.pin import load_pin, load_series  # noqa: E402

OUR_REQUIREMENTS = ['triton; sys_platform == "linux"']
# pytest-mock, pytest-asyncio and pillow: what upstream's own unit tests need (CI runs
# them against this install, see .ci/run).
TEST_REQUIREMENTS = [
    "pytest>=8",
    "ruff>=0.15",
    "mypy>=1.10",
    "tomli-w>=1.0",
    "pytest-mock",
    "pytest-asyncio",
    "pillow",
]


def main() -> None:
    try:
        tree = ensure_vendored(ROOT)
        pin = load_pin(ROOT)
        units = [u.name for u in load_series(ROOT)]
        write_build_info(ROOT, pin, units)
        write_notice(ROOT, tree, pin, units)
        reqs = upstream_requirements(tree, pin)
        scripts = upstream_console_scripts(tree)
    except VendorError as err:
        sys.exit(f"\nspeculators-kimi build failed:\n{err}\n")
    # A stale build/lib would leak files a unit removed into the wheel, and a stale
    # egg-info in the project root would shadow the installed entry points for code
    # run from here (importlib.metadata also scans the current directory).
    shutil.rmtree(ROOT / "build" / "lib", ignore_errors=True)
    shutil.rmtree(ROOT / "speculators_kimi.egg-info", ignore_errors=True)
    src = tree.relative_to(ROOT) / "src"
    upstream_pkgs = find_packages(
        str(ROOT / src), include=["speculators", "speculators.*"]
    )
    ours = find_packages(str(ROOT), include=["speculators_kimi", "speculators_kimi.*"])
    setup(
        packages=upstream_pkgs + ours,
        package_dir={"speculators": str(src / "speculators")},
        package_data={"speculators": ["py.typed"], "speculators_kimi": ["data/*"]},
        install_requires=reqs.base + OUR_REQUIREMENTS,
        extras_require={**reqs.extras, "test": TEST_REQUIREMENTS},
        entry_points={
            "console_scripts": [
                *scripts,
                "speculators-kimi = speculators_kimi.cli:main",
            ],
            "speculators.attention_backends": [
                "triton = speculators_kimi.kernels.backend:TritonBackend",
            ],
        },
        license_files=[
            "LICENSE",
            f"{tree.relative_to(ROOT)}/UPSTREAM-LICENSE",
            f"{tree.relative_to(ROOT)}/NOTICE",
        ],
    )


main()
