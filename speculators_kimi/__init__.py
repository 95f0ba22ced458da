"""speculators-kimi: upstream `speculators`, patched for nested verifiers.

`import speculators` gives the patched copy of the pinned upstream release; this
package says which release and which patch units (`UPSTREAM_VERSION`, `PATCHES`) and
holds what is ours alone (kernels, doctor, hidden-state generation, demo).
"""

try:
    from ._build_info import PATCHES, UPSTREAM_NAME, UPSTREAM_SHA256, UPSTREAM_VERSION
except ModuleNotFoundError:  # a source checkout: see _source_build_info
    from ._source_build_info import (
        PATCHES,
        UPSTREAM_NAME,
        UPSTREAM_SHA256,
        UPSTREAM_VERSION,
    )
from .install_check import warn_if_upstream_installed

__version__ = "0.1.0"

__all__ = [
    "PATCHES",
    "UPSTREAM_NAME",
    "UPSTREAM_SHA256",
    "UPSTREAM_VERSION",
    "__version__",
]

warn_if_upstream_installed()
