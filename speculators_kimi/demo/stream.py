"""A stage's subprocess (the trainer), offline, its milestones shown live.

The trainer writes about 19 lines of metrics per step: they all go to a log
file, and only the lines a user follows a run by (epochs, resume, checkpoints,
problems) reach the terminal.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

__all__ = ["offline_env", "stream"]

# The demo's lines print as ``[demo] ...``, whichever of its modules logs them.
logger = logging.getLogger("speculators_kimi.demo")

# The trainer's lines the demo shows: epochs, resume, checkpoints, problems.
_MILESTONE = re.compile(
    r"Training epoch|Validation epoch|Found checkpoint|Resuming|incomplete|"
    r"WARNING|ERROR|Error|Traceback"
)
_LOG_TAIL = 40


def offline_env() -> dict[str, str]:
    """This environment with the Hub and datasets offline (the demo downloads
    nothing) and Python's output unbuffered (milestones show as they happen)."""
    return dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PYTHONUNBUFFERED="1",
    )


def stream(cmd: list[str], log: Path) -> str:
    """Run ``cmd``, its whole output into ``log`` and its milestones (epochs,
    resume, warnings) shown live; return the output. On failure the log's last
    lines are shown too."""
    logger.info("%s", "+ " + shlex.join(cmd))
    logger.info("%s", f"its full output: {log}")
    chunks: list[str] = []
    with log.open("a") as sink:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=offline_env(),
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            if _MILESTONE.search(line):
                sys.stdout.write(line)
            sink.write(line)
            chunks.append(line)
        rc = proc.wait()
    if rc != 0:
        sys.stdout.write("".join(chunks[-_LOG_TAIL:]))
        raise RuntimeError(f"command failed ({rc}): {shlex.join(cmd)}; log: {log}")
    return "".join(chunks)
