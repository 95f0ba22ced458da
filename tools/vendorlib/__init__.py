"""Vendoring of the pinned upstream `speculators` release plus our patch series.

The flow is: `pin` (what upstream release, which units) -> `sdist` (fetch and verify
the release) -> `gitwork` (the units as git commits: `git am` in, `git format-patch`
out; the one way a unit is applied) -> `build` (what `setup.py` calls) -> `cli`
(`tools/vendor`). The series' tests (`test-series`, `dropin`) are `seriescheck`,
which imports this package, never the other way.

This package only uses the standard library and `git`, so the build backend can
import it before any dependency is installed.
"""

from .errors import VendorError

__all__ = ["VendorError"]
