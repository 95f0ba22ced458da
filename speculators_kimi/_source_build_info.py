"""What a source checkout vendors, read from its `upstream_patches/`.

An installed wheel carries `_build_info.py`, written by the build. A checkout (an
editable install, or python run from the repository root) has none: the same facts
come from the pin (`UPSTREAM.toml`) and the `series`, read here as data. The build
(`tools/vendorlib/pin.py`) reads the same two files and checks them; this reader
only states what they say, so the package never imports the build's code.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

PATCHES_DIR = Path(__file__).resolve().parents[1] / "upstream_patches"
if not (PATCHES_DIR / "UPSTREAM.toml").is_file():
    raise ImportError(
        f"speculators_kimi at {PATCHES_DIR.parent} has neither _build_info.py "
        "(written by the build) nor upstream_patches/ beside it; reinstall "
        "speculators-kimi"
    )

_PIN = tomllib.loads((PATCHES_DIR / "UPSTREAM.toml").read_text())["upstream"]
UPSTREAM_NAME: str = _PIN["name"]
UPSTREAM_VERSION: str = _PIN["version"]
UPSTREAM_SHA256: str = _PIN["sha256"].lower()
# One unit per line; "#" starts a comment (as the build reads it).
PATCHES: tuple[str, ...] = tuple(
    name
    for line in (PATCHES_DIR / "series").read_text().splitlines()
    if (name := line.split("#", 1)[0].strip())
)
