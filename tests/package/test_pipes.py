"""Our console scripts in a pipe whose reader has closed: no traceback, exit 141.

The reader is closed before the command starts, so every write the command makes
to stdout fails: the race of `speculators-kimi --version | grep -q 0.9.0` (which
printed a traceback about one run in five) is here on every run.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from speculators_kimi import cli
from speculators_kimi.pipes import EXIT_STATUS

BIN = Path(sys.executable).parent

#: One command line per way out of our entry points, and the exit status a closed
#: reader gives it: our return (`--version`: a Unix tool's 141), argparse's
#: SystemExit (`--help`: argparse drops a message it cannot write, then exits 0),
#: and the `speculators` door into upstream's Typer app (click exits 1 on EPIPE).
COMMANDS = [
    (["speculators-kimi", "--version"], EXIT_STATUS),
    (["speculators-kimi", "--help"], 0),
    (["speculators", "--version"], 1),
]


def test_commands_end_quietly_when_the_reader_has_closed() -> None:
    runs = []
    for argv, status in COMMANDS:
        read, write = os.pipe()
        os.close(read)
        runs.append(
            (
                argv,
                status,
                subprocess.Popen(
                    [str(BIN / argv[0]), *argv[1:]],
                    stdout=write,
                    stderr=subprocess.PIPE,
                    text=True,
                ),
            )
        )
        os.close(write)
    for argv, status, proc in runs:
        _, stderr = proc.communicate(timeout=60)
        assert stderr == "", f"{' '.join(argv)}: {stderr}"
        assert proc.returncode == status, " ".join(argv)


def test_a_log_line_into_a_closed_pipe_ends_the_command(capsys) -> None:
    """Our log lines go to stdout; a closed reader must stop the command as a
    failed print does, not print logging's "--- Logging error ---" per record."""
    read, write = os.pipe()
    os.close(read)
    cli.configure_logging()
    # Unbuffered, so that the record's write itself meets the closed pipe.
    pipe = io.TextIOWrapper(io.FileIO(write, "w"), write_through=True)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(sys, "stdout", pipe)
            with pytest.raises(BrokenPipeError):
                logging.getLogger("speculators_kimi.demo").info("a stage finished")
    finally:
        with contextlib.suppress(BrokenPipeError):
            pipe.close()
    assert "Logging error" not in capsys.readouterr().err
