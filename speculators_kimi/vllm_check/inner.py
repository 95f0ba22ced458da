"""What runs in the scratch interpreter: the check for the export's layout, its
report (with the check's own memory) as one JSON line on stdout.

``python -m speculators_kimi.vllm_check.inner ARGS_JSON``: ``ARGS_JSON`` is a
:class:`.request.CheckRequest` as JSON, as :func:`.cli.run` passes it, or a
list of them (checked in turn in this one process, vLLM imported once; one JSON
list of reports), as the tests pass several exports.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ..memory import process_memory
from .request import CheckRequest

__all__ = ["check_export", "main"]


def check_export(request: CheckRequest) -> dict[str, Any]:
    """The check for the export's layout (speculators format: EAGLE-3 or a
    block drafter; or native: MLA DSpark, XPress, MLA EAGLE-3)."""
    from speculators_kimi.export.k3_dspark import K3_MODEL_TYPE
    from speculators_kimi.export.xpress import is_xpress_export
    from speculators_kimi.served import BLOCK_ALGORITHMS

    from .block_layout import check_block_layout
    from .k3_dspark import check_k3_dspark
    from .native_mla import check_native_mla
    from .speculators_layout import check_speculators_layout
    from .xpress import check_xpress

    config = json.loads((Path(request.export) / "config.json").read_text())
    if config.get("speculators_model_type") in BLOCK_ALGORITHMS:
        report: dict[str, Any] = check_block_layout(request)
    elif config.get("model_type") == K3_MODEL_TYPE:
        report = check_k3_dspark(request, config)
    elif is_xpress_export(config):
        report = check_xpress(request, config)
    elif "speculators_config" in config:
        report = check_speculators_layout(request)
    else:
        report = check_native_mla(request, config)
    return report


def main(argv: list[str]) -> int:
    asked = json.loads(argv[0])
    reports = []
    for one in asked if isinstance(asked, list) else [asked]:
        report = check_export(CheckRequest(**one))
        report["memory"] = process_memory()
        reports.append(report)
    print(json.dumps(reports if isinstance(asked, list) else reports[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
