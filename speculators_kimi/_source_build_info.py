"""What a source checkout vendors, read from its `upstream_patches/`.

An installed wheel carries `_build_info.py`, written by the build. A checkout (an
editable install, or python run from the repository root) has none: the same facts
come from the pin and the series, through the build's own reader.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if not (ROOT / "upstream_patches" / "UPSTREAM.toml").is_file():
    raise ImportError(
        f"speculators_kimi at {ROOT} has neither _build_info.py (written by the build) "
        "nor upstream_patches/ beside it; reinstall speculators-kimi"
    )
sys.path.insert(0, str(ROOT / "tools"))
try:
    from vendorlib.pin import load_pin, load_series
finally:
    sys.path.remove(str(ROOT / "tools"))

_PIN = load_pin(ROOT)
UPSTREAM_NAME = _PIN.name
UPSTREAM_VERSION = _PIN.version
UPSTREAM_SHA256 = _PIN.sha256
PATCHES: tuple[str, ...] = tuple(u.name for u in load_series(ROOT))
