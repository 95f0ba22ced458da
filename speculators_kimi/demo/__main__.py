"""``python -m speculators_kimi.demo``: the ``demo`` command."""

from ..cli import command_main

raise SystemExit(command_main("demo"))
