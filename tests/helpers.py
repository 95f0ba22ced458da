"""Shared helpers for the tests: the project tree, subprocess runs, clean copies."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from vendorlib.pin import load_pin  # noqa: E402
from vendorlib.sdist import extract_all, obtain  # noqa: E402


def pinned_sdist() -> Path:
    """The verified upstream sdist (downloaded into the cache on first use)."""
    pin = load_pin(ROOT)
    return obtain(pin.name, pin.version, pin.sdist, pin.sha256)


def clean_copy(dest: Path) -> Path:
    """What a fresh clone of the work tree holds: tracked + untracked, not ignored."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def free_port() -> int:
    """A TCP port nobody listens on right now (for torchrun's rendezvous)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def torchrun_train(train_argv: list[str], nproc: int = 2) -> list[str]:
    """``torchrun -m speculators.train ...`` on one host for the arguments of a
    ``speculators train ...`` command line (``train_argv`` without those words)."""
    return [
        str(Path(sys.executable).parent / "torchrun"),
        "--nproc_per_node",
        str(nproc),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        "-m",
        "speculators.train",
        *train_argv,
    ]


def run(
    cmd: list[str],
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 900,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run a command, capturing text output; on failure show it in the assertion."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.run(
        cmd,
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, cmd))} exited {proc.returncode}\n"
            f"--- stdout ---\n{proc.stdout[-6000:]}\n"
            f"--- stderr ---\n{proc.stderr[-6000:]}"
        )
    return proc


def extract_tar(tf: tarfile.TarFile, dest: Path) -> None:
    """Extract a test archive the way the vendoring code extracts an sdist."""
    extract_all(tf, dest, Path(str(tf.name or "archive")))
