"""What runs in the scratch interpreter: the check for the export's layout, its
report (with the check's own memory) as one JSON line on stdout.

``python -m speculators_kimi.vllm_check.inner ARGS_JSON``: ``ARGS_JSON`` is the
command's parsed arguments, as :func:`.cli.run` passes them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..memory import process_memory

__all__ = ["check_export", "main"]


def check_export(args: argparse.Namespace) -> dict[str, Any]:
    """The check for the export's layout (speculators format, or native MLA)."""
    from .native_mla import check_native_mla
    from .speculators_layout import check_speculators_layout

    config = json.loads((Path(args.export) / "config.json").read_text())
    if "speculators_config" in config:
        report: dict[str, Any] = check_speculators_layout(args)
    else:
        report = check_native_mla(args, config)
    return report


def main(argv: list[str]) -> int:
    args = argparse.Namespace(**json.loads(argv[0]))
    report = check_export(args)
    report["memory"] = process_memory()
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
