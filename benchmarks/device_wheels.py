"""Fill ``.device-wheels/`` with what the lent GPU's image lacks to run us.

The device image (Python 3.12, torch 2.11, triton 3.6; its package list is in the
device tool's KINDS.md) has no package registry, and lacks or carries older copies of
upstream's dependencies (pydantic-settings, loguru, openai, hs-connectors; transformers
5.17 and huggingface_hub 1.x where 0.9.0 needs newer). ``run_on_device.sh`` installs
every wheel in ``.device-wheels/`` with ``--no-deps`` before its steps.

What is carried: the closure of this install's runtime requirements (markers
evaluated for CPython 3.12 on x86-64 Linux), each at the version installed here, so
the device runs what CI tests; minus what the image already holds and is too heavy to
carry (torch, triton, the CUDA libraries, numpy, pyarrow, pandas). The device tool
carries at most 64 MiB with the working tree; this script fails past ``--max-mib``.

    python benchmarks/device_wheels.py            # downloads, then lists sizes
    python benchmarks/device_wheels.py --dry-run  # the list only

Run it from the repository root with the project's virtual environment.
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = "speculators-kimi"
DEST = Path(".device-wheels")
# The image's own copies of these are used: each is large, compiled against the
# image's CUDA, or both.
IMAGE_PROVIDES = ("torch", "triton", "numpy", "pyarrow", "pandas")
IMAGE_PREFIXES = ("nvidia-", "cuda-")
TARGET_ENV = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "extra": "",
}
# pip matches a manylinux tag exactly: every glibc level a wheel here is built for
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28, 31, 34, 35)] + [
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
]


def carried(name: str) -> bool:
    return name not in IMAGE_PROVIDES and not name.startswith(IMAGE_PREFIXES)


def closure(root: str) -> dict[str, str]:
    """Canonical name -> installed version for every runtime requirement of ``root``
    that the device needs and the image does not provide."""
    pins: dict[str, str] = {}
    queue = [root]
    seen = {canonicalize_name(root)}
    while queue:
        dist = metadata.distribution(queue.pop())
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate(TARGET_ENV):
                continue
            name = canonicalize_name(req.name)
            if name in seen or not carried(name):
                continue
            seen.add(name)
            try:
                version = metadata.version(name)
            except metadata.PackageNotFoundError:
                raise SystemExit(
                    f"{req.name} (required by {dist.metadata['Name']}) is not "
                    "installed here: install the project (pip install -e .) first"
                ) from None
            if not req.specifier.contains(version, prereleases=True):
                raise SystemExit(
                    f"{req.name} {version} here does not meet {dist.metadata['Name']}"
                    f"'s '{line}': fix this environment first"
                )
            pins[name] = version
            queue.append(name)
    return pins


def download(pins: dict[str, str], dest: Path) -> None:
    dest.mkdir(exist_ok=True)
    for old in dest.glob("*.whl"):  # one version of each: two stop the install
        old.unlink()
    platform_args = [arg for p in PLATFORMS for arg in ("--platform", p)]
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        "3.12",
        "--implementation",
        "cp",
        *platform_args,
        "-d",
        str(dest),
        *(f"{name}=={version}" for name, version in sorted(pins.items())),
    ]
    subprocess.run(cmd, check=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dest", type=Path, default=DEST)
    p.add_argument("--max-mib", type=float, default=40.0)
    p.add_argument("--dry-run", action="store_true", help="list, download nothing")
    args = p.parse_args(argv)
    pins = closure(ROOT)
    for name, version in sorted(pins.items()):
        print(f"{name}=={version}")
    if args.dry_run:
        return 0
    download(pins, args.dest)
    wheels = sorted(args.dest.glob("*.whl"))
    total = sum(w.stat().st_size for w in wheels) / 2**20
    print(f"{len(wheels)} wheels, {total:.1f} MiB in {args.dest}")
    if len(wheels) != len(pins):
        print(f"expected {len(pins)} wheels, one per package", file=sys.stderr)
        return 1
    if total > args.max_mib:
        print(
            f"over --max-mib {args.max_mib}: the device tool carries 64 MiB with "
            "the working tree; add the largest the image has to IMAGE_PROVIDES",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
