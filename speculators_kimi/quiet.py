"""Library chatter silenced while we build what the user did not ask to see
(training's notes on a draft doctor only plans, the sweep's ~200 models)."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator

__all__ = ["quiet_libraries"]


@contextlib.contextmanager
def quiet_libraries() -> Iterator[None]:
    """No warnings, no standard logging below ERROR, no ``speculators`` loguru
    lines and no transformers progress bars inside; everything as before after
    (the caller may run inside another program, such as a test)."""
    from loguru import logger
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    logger.disable("speculators")
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(logging.NOTSET)
        logger.enable("speculators")
        hf_logging.enable_progress_bar()
        hf_logging.set_verbosity(verbosity)
