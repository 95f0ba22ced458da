"""The vLLM command lines that serve an export, quoted for a shell."""

from __future__ import annotations

import json
import shlex

from .draft import ExportResult

__all__ = ["launch_commands"]


def launch_commands(result: ExportResult) -> list[str]:
    """The ways to serve the export with vLLM: two for the speculators layout,
    one (``--speculative-config``) for the native MLA layout."""
    spec = json.dumps(
        {
            "model": str(result.out.resolve()),
            "method": result.method,
            "num_speculative_tokens": result.num_speculative_tokens,
        }
    )
    with_config = (
        f"vllm serve {shlex.quote(result.verifier_id)} --speculative-config "
        f"{shlex.quote(spec)}"
    )
    if result.layout == "native":
        return [with_config]
    return [f"vllm serve {shlex.quote(str(result.out.resolve()))}", with_config]
