"""Fetch the pinned upstream sdist, verify its sha256, extract it.

Source order: an explicit path (``SPECULATORS_KIMI_UPSTREAM_SDIST`` or ``--sdist``),
then the local cache, then the package index (PyPI's JSON API). Nothing downstream
ever sees bytes whose hash was not checked.
"""

from __future__ import annotations

import base64
import configparser
import hashlib
import json
import os
import shutil
import ssl
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from .errors import VendorError

SDIST_ENV = "SPECULATORS_KIMI_UPSTREAM_SDIST"
DEFAULT_INDEX = "https://pypi.org/simple"  # PEP 691; pip's index-url overrides it


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "speculators-kimi" / "sdists"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _pip_config_files() -> list[Path]:
    """pip's configuration files in the order pip reads them (a later one's
    values win): global, user, site, then ``PIP_CONFIG_FILE``."""
    home = Path.home()
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(home / ".config")
    dirs = os.environ.get("XDG_CONFIG_DIRS") or "/etc/xdg"
    files = [Path(d) / "pip" / "pip.conf" for d in reversed(dirs.split(os.pathsep))]
    files += [Path("/etc/pip.conf"), home / ".pip" / "pip.conf"]
    files.append(Path(xdg) / "pip" / "pip.conf")
    files.append(Path(sys.prefix) / "pip.conf")
    if os.environ.get("VIRTUAL_ENV"):
        files.append(Path(os.environ["VIRTUAL_ENV"]) / "pip.conf")
    if os.environ.get("PIP_CONFIG_FILE"):
        files.append(Path(os.environ["PIP_CONFIG_FILE"]))
    return files


def _pip_option(name: str) -> str | None:
    """pip's value of option ``name`` (e.g. ``index-url``): ``PIP_<NAME>``, else
    its configuration files (``[install]`` over ``[global]``, a later file over
    an earlier one).

    The build runs in pip's build environment, which passes neither pip's
    options nor its configuration on: a mirror set in pip.conf is read here.
    """
    env = os.environ.get("PIP_" + name.upper().replace("-", "_"))
    if env:
        return env
    found = None
    for path in _pip_config_files():
        config = configparser.ConfigParser(interpolation=None)
        try:
            config.read(path)
        except (OSError, configparser.Error):
            continue
        for section in ("global", "install"):
            if config.has_option(section, name):
                found = config.get(section, name)
    return found


def index_url() -> str:
    """The package index pip would use (its ``index-url``), else PyPI."""
    return _pip_option("index-url") or DEFAULT_INDEX


def _open(url: str, timeout: float, accept: str | None = None) -> Any:
    """``urlopen`` of ``url``, sending its ``user:password@`` as basic auth
    (urllib itself does not) and trusting pip's ``cert`` if set."""
    parts = urllib.parse.urlsplit(url)
    auth = None
    if parts.username is not None:
        token = f"{urllib.parse.unquote(parts.username)}:"
        token += urllib.parse.unquote(parts.password or "")
        auth = "Basic " + base64.b64encode(token.encode()).decode()
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        url = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    if auth:
        request.add_unredirected_header("Authorization", auth)
    cert = _pip_option("cert")  # pip's CA bundle, for a mirror's own CA
    context = ssl.create_default_context(cafile=cert) if cert else None
    https = urllib.request.HTTPSHandler(context=context)
    opener = urllib.request.build_opener(https, _SameHostAuth(parts.hostname, auth))
    return opener.open(request, timeout=timeout)


class _SameHostAuth(urllib.request.HTTPRedirectHandler):
    """Redirects keep the credentials on the index's host only, as pip does (a
    CDN or a presigned URL elsewhere must not get them)."""

    def __init__(self, host: str | None, auth: str | None) -> None:
        self.host, self.auth = host, auth

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        same_host = urllib.parse.urlsplit(newurl).hostname == self.host
        if new is not None and self.auth and same_host:
            new.add_unredirected_header("Authorization", self.auth)
        return new


def index_file(name: str, filename: str, hint: str) -> tuple[str, str | None]:
    """URL and listed sha256 of ``filename`` on the PEP 691 index page of ``name``.

    ``hint`` says how to do without the index; it ends the error messages.
    """
    index = index_url().rstrip("/")
    page = f"{index}/{name}/"
    shown = _without_password(page)
    try:
        with _open(page, 60, "application/vnd.pypi.simple.v1+json") as resp:
            meta = json.load(resp)
    except (OSError, ValueError) as err:
        raise VendorError(
            f"cannot read the package index page {shown}: {err}. {hint}"
        ) from err
    for entry in meta.get("files", []):
        if entry.get("filename") == filename:
            url = urllib.parse.urljoin(page, entry["url"])
            return url, (entry.get("hashes") or {}).get("sha256")
    raise VendorError(f"{shown} lists no file {filename}; is the version right?")


def _without_password(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def download(url: str, dest: Path) -> None:
    """Download ``url`` to ``dest`` (through a `.part` file, renamed when complete)."""
    print(f"[speculators-kimi] downloading {_without_password(url)}", file=sys.stderr)
    tmp = dest.with_name(dest.name + ".part")
    with _open(url, 300) as resp, tmp.open("wb") as out:
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
