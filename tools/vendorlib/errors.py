"""The one error type the vendoring code raises: its message names cause and fix."""


class VendorError(Exception):
    """A vendoring step failed; ``str(err)`` says what, where and how to fix it."""
