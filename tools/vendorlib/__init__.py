"""Vendoring of the pinned upstream `speculators` release plus our patch series.

The flow is: `pin` (what upstream release, which units) -> `sdist` (fetch and verify
the release) -> `units` (apply the series to a tree) -> `gitwork` (the same as git
commits, and back) -> `build` (what `setup.py` calls) -> `cli` (`tools/vendor`).

This package only uses the standard library and `git`, so the build backend can
import it before any dependency is installed.
"""

from .errors import VendorError

__all__ = ["VendorError"]
