"""The PEP 517 build backend: setuptools, once the vendored tree is in place.

`pyproject.toml` names this module (`backend-path = ["tools"]`). Every hook first
makes sure `.vendored/` holds upstream's pinned release with our units applied (see
`build.ensure_vendored`: materialized from a clone, checked as shipped in our sdist),
then hands over to `setuptools.build_meta`, whose `setup.py` only reads that tree.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from setuptools import build_meta as _setuptools

from .build import ensure_vendored
from .errors import VendorError

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]


def _after_vendoring(hook: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(hook)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            ensure_vendored(Path.cwd())  # PEP 517 runs hooks in the source tree
        except VendorError as err:
            raise SystemExit(f"\nspeculators-kimi build failed:\n{err}\n") from None
        return hook(*args, **kwargs)

    return run


build_editable = _after_vendoring(_setuptools.build_editable)
build_sdist = _after_vendoring(_setuptools.build_sdist)
build_wheel = _after_vendoring(_setuptools.build_wheel)
get_requires_for_build_editable = _after_vendoring(
    _setuptools.get_requires_for_build_editable
)
get_requires_for_build_sdist = _after_vendoring(
    _setuptools.get_requires_for_build_sdist
)
get_requires_for_build_wheel = _after_vendoring(
    _setuptools.get_requires_for_build_wheel
)
prepare_metadata_for_build_editable = _after_vendoring(
    _setuptools.prepare_metadata_for_build_editable
)
prepare_metadata_for_build_wheel = _after_vendoring(
    _setuptools.prepare_metadata_for_build_wheel
)
