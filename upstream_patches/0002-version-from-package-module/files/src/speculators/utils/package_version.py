"""Version of the speculators code that is running, however it was installed."""

import importlib.metadata

__all__ = ["installing_distribution", "speculators_version"]


def speculators_version() -> str:
    """Return the version of the running ``speculators`` package.

    Prefers ``speculators.version``, which the release build writes into the package,
    so the answer describes the code that is imported even when the package was
    installed under another distribution name (a downstream redistribution) or next
    to a different ``speculators`` distribution. Falls back to the distribution
    metadata for source checkouts without a generated version module.

    :return: The version string, e.g. ``"0.9.0"``.
    :raises importlib.metadata.PackageNotFoundError: If neither source is available.
    """
    try:
        from speculators.version import version  # noqa: PLC0415
    except ImportError:
        return importlib.metadata.version("speculators")
    return str(version)


def installing_distribution() -> importlib.metadata.Distribution | None:
    """Return the distribution that installed ``speculators``, when it is another.

    A downstream redistribution ships the ``speculators`` package under its own
    distribution name; naming it (and its version) tells which build is running.

    :return: That distribution, or ``None`` when the package comes from the
        ``speculators`` distribution itself or from no distribution at all.
    """
    names = importlib.metadata.packages_distributions().get("speculators", [])
    for name in names:
        if name.replace("_", "-").lower() != "speculators":
            return importlib.metadata.distribution(name)
    return None
