"""The `speculators` console script: upstream's entry point, with a fast door.

`import speculators` imports every model (torch, transformers: seconds), as
upstream's package does and as its users rely on (models registered, schemas
reloaded). `speculators --version`, `speculators --help` and a bare `speculators`
need none of it: for exactly those, upstream's entry module (`UPSTREAM_ENTRY`) is
loaded under the `speculators` package without running the package's
`__init__`, prints its answer and the process exits. Unit 0021 keeps that path
light (`speculators.cli` imports a command's module only to run it). Every other
command line, and every `import speculators` in user code, goes through the
package as upstream's does.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Callable

from .pipes import quiet_when_reader_closes

#: Upstream's console script for `speculators` (its release's entry point);
#: tests/package/test_package.py checks it against the pinned release's metadata.
UPSTREAM_ENTRY = "speculators.__main__:app"

#: Command lines answered without the package: they only print, then exit.
FAST_ARGV: tuple[list[str], ...] = ([], ["--help"], ["--version"])


def _upstream_entry() -> Callable[[], None]:
    module, _, attr = UPSTREAM_ENTRY.partition(":")
    return getattr(importlib.import_module(module), attr)


def _entry_without_package_init() -> Callable[[], None] | None:
    """Upstream's entry function, its package's `__init__` not run (or None)."""
    spec = importlib.util.find_spec("speculators")
    if spec is None or spec.submodule_search_locations is None:
        return None
    package = types.ModuleType("speculators")
    package.__spec__ = spec
    package.__path__ = list(spec.submodule_search_locations)
    package.__file__ = spec.origin
    package.__package__ = "speculators"
    sys.modules["speculators"] = package
    try:
        return _upstream_entry()
    except ImportError:
        # The entry path needs the package after all: forget the partial import
        # and take the ordinary route.
        for name in [m for m in sys.modules if m.partition(".")[0] == "speculators"]:
            del sys.modules[name]
        return None


@quiet_when_reader_closes
def main() -> None:
    """Run `speculators` as upstream's console script does (and end quietly when
    the reader of its output closes, :mod:`.pipes`)."""
    if sys.argv[1:] in FAST_ARGV and "speculators" not in sys.modules:
        fast = _entry_without_package_init()
        if fast is not None:
            fast()
            return
    _upstream_entry()()
