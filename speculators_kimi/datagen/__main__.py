"""``python -m speculators_kimi.datagen``: the generate-hidden-states command."""

from .cli import main

raise SystemExit(main())
