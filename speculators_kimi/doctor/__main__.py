"""``python -m speculators_kimi.doctor``: the doctor command."""

from ..cli import command_main

raise SystemExit(command_main("doctor"))
