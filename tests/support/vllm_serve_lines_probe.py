"""Run by ``tests/export/test_export.py`` in the scratch vLLM 0.34 environment:
what vLLM's own ``vllm serve`` parser makes of the command lines ``export``
prints.

Reads ``[line, ...]`` (JSON, argv[1]) and prints, per line, the model the
engine arguments name and the ``--speculative-config`` keys that are not fields
of vLLM's ``SpeculativeConfig`` (a pydantic dataclass built with
``extra="forbid"``: ``vllm/config/utils.py`` l. 59-77, ``config/speculative.py``
l. 448-449), so a key 0.34 rejects is reported (``unknown_keys``) without
building the config, which would load the model. The parser is what ``vllm
serve`` builds (``entrypoints/common/cli_args.py`` l. 432 ``make_arg_parser``,
l. 540 ``validate_parsed_serve_args``; ``engine/arg_utils.py`` l. 1895-1897 parse
``--speculative-config`` as JSON).
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys


def probe(line: str) -> dict:
    from vllm.config import SpeculativeConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.common.cli_args import (
        make_arg_parser,
        validate_parsed_serve_args,
    )
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    argv = shlex.split(line)
    assert argv[:2] == ["vllm", "serve"], argv
    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    args = parser.parse_args(argv[2:])
    validate_parsed_serve_args(args)
    args.model = args.model_tag
    engine = AsyncEngineArgs.from_cli_args(args)
    fields = {f.name for f in dataclasses.fields(SpeculativeConfig)}
    spec = engine.speculative_config or {}
    return {
        "line": line,
        "model": engine.model,
        "speculative_config": spec,
        "unknown_keys": sorted(k.replace("-", "_") for k in spec if k not in fields),
    }


if __name__ == "__main__":
    import vllm

    lines = json.loads(sys.argv[1])
    print(json.dumps({"vllm": vllm.__version__, "lines": [probe(x) for x in lines]}))
