"""Detect a `speculators` package that is not (all) this distribution's.

Both upstream's `speculators` distribution and ours write the same top-level
`speculators` package, and pip cannot know it: whichever was installed last owns
the files, and uninstalling either deletes the files both list. So two things are
checked, cheaply, on import: upstream's distribution is installed beside ours,
and the `speculators` files our install wrote still hold what it wrote
(upstream installed over ours, or `pip uninstall speculators` deleted them,
leaves upstream's unpatched code or none, and `pip check` sees nothing).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import urllib.parse
import warnings
from base64 import urlsafe_b64encode
from dataclasses import dataclass, field
from pathlib import Path
from urllib.request import url2pathname

DIST_NAME = "speculators-kimi"
UPSTREAM_DIST = "speculators"
PACKAGE = "speculators"

_warned = False


class UpstreamConflictWarning(UserWarning):
    """Upstream `speculators` and `speculators-kimi` are installed together."""


@dataclass(frozen=True)
class InstallState:
    """What is wrong with the installed `speculators` package, if anything."""

    upstream_version: str | None = None
    #: our `speculators/` files that are gone, or hold other bytes than ours
    missing: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    #: how to install this distribution again (a path, a URL or its name)
    source: str = DIST_NAME

    @property
    def files_replaced(self) -> bool:
        return bool(self.missing or self.changed)

    @property
    def ok(self) -> bool:
        return self.upstream_version is None and not self.files_replaced


def upstream_distribution_version() -> str | None:
    """Version of upstream's own `speculators` distribution, if one is installed."""
    try:
        return importlib.metadata.version(UPSTREAM_DIST)
    except importlib.metadata.PackageNotFoundError:
        return None


def _record_hash(path: Path) -> str:
    digest = hashlib.sha256(path.read_bytes()).digest()
    return "sha256=" + urlsafe_b64encode(digest).rstrip(b"=").decode()


def replaced_files(
    dist: importlib.metadata.Distribution,
) -> tuple[list[str], list[str]]:
    """``(missing, changed)``: ``dist``'s `speculators/` files, as its RECORD lists
    them, that are gone or hold other bytes. An editable install lists none."""
    missing, changed = [], []
    for entry in dist.files or ():
        if entry.parts[0] != PACKAGE or entry.hash is None:
            continue
        path = Path(str(entry.locate()))
        if not path.is_file():
            missing.append(str(entry))
        elif _record_hash(path) != f"{entry.hash.mode}={entry.hash.value}":
            changed.append(str(entry))
    return missing, changed


def install_source(dist: importlib.metadata.Distribution) -> str:
    """What ``pip install`` took to install ``dist`` (PEP 610's record of a local
    directory, file or URL; ``-e`` for an editable one), or its name for an
    install from the index."""
    text = dist.read_text("direct_url.json")
    try:
        record = json.loads(text) if text else {}
        url, editable = record["url"], record.get("dir_info", {}).get("editable")
    except (ValueError, KeyError, TypeError, AttributeError):
        return DIST_NAME
    parsed = urllib.parse.urlparse(url)
    source = url2pathname(parsed.path) if parsed.scheme == "file" else url
    return f"-e {source}" if editable else source


def install_state(dist: importlib.metadata.Distribution | None = None) -> InstallState:
    """The state of this environment's `speculators` package (``dist``: ours)."""
    if dist is None:
        try:
            dist = importlib.metadata.distribution(DIST_NAME)
        except importlib.metadata.PackageNotFoundError:  # a bare source tree
            return InstallState(upstream_version=upstream_distribution_version())
    missing, changed = replaced_files(dist)
    return InstallState(
        upstream_version=upstream_distribution_version(),
        missing=missing,
        changed=changed,
        source=install_source(dist),
    )


def conflict_message(state: InstallState) -> str:
    """What is wrong with ``state``, and the commands that fix it."""
    problems = []
    if state.upstream_version is not None:
        problems.append(
            f"upstream `{UPSTREAM_DIST}` {state.upstream_version} is installed beside "
            f"`{DIST_NAME}`; both ship the `{PACKAGE}` package, so its files are "
            "whichever was installed last (possibly a mix)"
        )
    if state.files_replaced:
        named = (state.missing + state.changed)[:3]
        counts = [f"{len(state.missing)} are gone"] if state.missing else []
        counts += [f"{len(state.changed)} hold other code"] if state.changed else []
        problems.append(
            f"of the `{PACKAGE}` files `{DIST_NAME}` installed, "
            f"{' and '.join(counts)} (e.g. {', '.join(named)}): the "
            "nested-verifier patches are not what runs"
        )
    fix = [f"    pip uninstall -y {UPSTREAM_DIST}"] if state.upstream_version else []
    fix.append(f"    pip install --force-reinstall --no-deps {state.source}")
    text = "; and ".join(problems)
    return (
        text[0].upper()
        + text[1:]
        + ". Fix:\n"
        + "\n".join(fix)
        + "\n(upstream's `torchvision` and `torchaudio` stay installed; this "
        "distribution does not need them: if `import speculators` then fails inside "
        "them, `pip uninstall -y torchvision torchaudio`)"
    )


def warn_if_upstream_installed() -> bool:
    """Warn once per process if the `speculators` package may not be ours; True
    if so."""
    global _warned
    state = install_state()
    if state.ok:
        return False
    if not _warned:
        _warned = True
        warnings.warn(conflict_message(state), UpstreamConflictWarning, stacklevel=3)
    return True
