import io
import logging
import sys

from rich.logging import RichHandler

from speculators.train.logger import setup_root_logger

PATH = "/tmp/run/checkpoints/" + "a-long-directory-name/" * 6 + ".1.partial"
MESSAGE = f"Checkpoint {PATH} is incomplete; set aside as {PATH}.incomplete"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _setup_on_a_bare_root(monkeypatch) -> None:
    """``setup_root_logger`` on a root logger without handlers, as a fresh process
    has it (in the test's body: pytest adds its own handlers before)."""
    monkeypatch.setattr(logging.root, "handlers", [])
    monkeypatch.setattr(logging.root, "level", logging.WARNING)
    setup_root_logger()


def test_a_piped_log_keeps_each_record_on_one_line(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    _setup_on_a_bare_root(monkeypatch)
    (handler,) = logging.root.handlers
    assert not isinstance(handler, RichHandler)
    logging.getLogger("speculators.train.checkpointer").warning(MESSAGE)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].endswith(f"WARNING  {MESSAGE}")


def test_a_terminal_keeps_rich_formatting(monkeypatch):
    monkeypatch.setattr(sys, "stdout", _Terminal())
    _setup_on_a_bare_root(monkeypatch)
    (handler,) = logging.root.handlers
    assert isinstance(handler, RichHandler)
