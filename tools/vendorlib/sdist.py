"""Fetch the pinned upstream sdist, verify its sha256, extract it.

Source order: an explicit path (``SPECULATORS_KIMI_UPSTREAM_SDIST`` or ``--sdist``),
then the local cache, then the package index (PyPI's JSON API). Nothing downstream
ever sees bytes whose hash was not checked.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

from .errors import VendorError

SDIST_ENV = "SPECULATORS_KIMI_UPSTREAM_SDIST"
DEFAULT_INDEX = "https://pypi.org/simple"  # PEP 691; PIP_INDEX_URL overrides it


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "speculators-kimi" / "sdists"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def index_file(name: str, filename: str, hint: str) -> tuple[str, str | None]:
    """URL and listed sha256 of ``filename`` on the PEP 691 index page of ``name``.

    ``hint`` says how to do without the index; it ends the error messages.
    """
    index = os.environ.get("PIP_INDEX_URL", DEFAULT_INDEX).rstrip("/")
    page = f"{index}/{name}/"
    request = urllib.request.Request(
        page, headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            meta = json.load(resp)
    except (OSError, ValueError) as err:
        raise VendorError(
            f"cannot read the package index page {page}: {err}. {hint}"
        ) from err
    for entry in meta.get("files", []):
        if entry.get("filename") == filename:
            url = urllib.parse.urljoin(page, entry["url"])
            return url, (entry.get("hashes") or {}).get("sha256")
    raise VendorError(f"{page} lists no file {filename}; is the version right?")


def download(url: str, dest: Path) -> None:
    """Download ``url`` to ``dest`` (through a `.part` file, renamed when complete)."""
    print(f"[speculators-kimi] downloading {url}", file=sys.stderr)
    tmp = dest.with_name(dest.name + ".part")
    with urllib.request.urlopen(url, timeout=300) as resp, tmp.open("wb") as out:
        shutil.copyfileobj(resp, out)
    tmp.replace(dest)


def verify(path: Path, expected: str, origin: str) -> None:
    """Raise unless ``path`` hashes to ``expected``; the message names the fix."""
    got = sha256_of(path)
    if got != expected:
        raise VendorError(
            f"sha256 mismatch for {path.name} (from {origin}):\n"
            f"  expected {expected} (upstream_patches/UPSTREAM.toml)\n"
            f"  got      {got}\n"
            "This is not the pinned upstream release; nothing was built or installed. "
            f"Fix: point {SDIST_ENV} at the genuine sdist (or unset it to download), "
            "delete a corrupted cached copy, or move the pin with "
            "`tools/vendor rebase --to <version>`."
        )


def obtain(
    name: str, version: str, filename: str, sha256: str, explicit: Path | None = None
) -> Path:
    """Return a local path to the verified sdist, downloading it if needed."""
    explicit = explicit or (
        Path(os.environ[SDIST_ENV]) if os.environ.get(SDIST_ENV) else None
    )
    if explicit is not None:
        if not explicit.is_file():
            raise VendorError(f"{SDIST_ENV}/--sdist points at {explicit}: no such file")
        verify(explicit, sha256, str(explicit))
        return explicit
    cached = cache_dir() / filename
    if cached.is_file():
        if sha256_of(cached) == sha256:
            return cached
        cached.unlink()  # a partial or stale copy: fetch again below
    cached.parent.mkdir(parents=True, exist_ok=True)
    url, _ = index_file(
        name,
        filename,
        f"Download {filename} by hand (`pip download --no-deps --no-binary :all: "
        f"{name}=={version}`) and set {SDIST_ENV}=<path>",
    )
    download(url, cached)
    try:
        verify(cached, sha256, url)
    except VendorError:
        cached.unlink(missing_ok=True)
        raise
    return cached


def _check_members(tf: tarfile.TarFile, sdist: Path) -> None:
    """Refuse members that would land outside the target (older Pythons)."""
    for member in tf.getmembers():
        parts = Path(member.name).parts
        if member.name.startswith("/") or ".." in parts:
            raise VendorError(f"{sdist}: unsafe member path {member.name!r}")
        if member.issym() or member.islnk() or member.isdev():
            raise VendorError(f"{sdist}: unexpected link or device {member.name!r}")


def extract_all(tf: tarfile.TarFile, dest: Path, origin: Path) -> None:
    """``tf.extractall(dest)``, refusing members that would land outside ``dest``."""
    if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4
        tf.extractall(dest, filter="data")
    else:
        _check_members(tf, origin)
        tf.extractall(dest)  # members checked above


def extract(sdist: Path, dest: Path) -> Path:
    """Extract ``sdist`` so that its top directory's contents land in ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp, tarfile.open(sdist) as tf:
        extract_all(tf, Path(tmp), sdist)
        tops = list(Path(tmp).iterdir())
        if len(tops) != 1 or not tops[0].is_dir():
            raise VendorError(f"{sdist}: expected one top-level directory")
        for child in tops[0].iterdir():
            shutil.move(str(child), dest / child.name)
    return dest
