"""``python -m speculators_kimi.datagen``: the generate-hidden-states command."""

from ..cli import command_main

raise SystemExit(command_main("generate-hidden-states"))
