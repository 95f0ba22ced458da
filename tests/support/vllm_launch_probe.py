"""Run by ``tests/upstream/test_launch_vllm.py`` in the scratch vLLM environment:
what vLLM 0.33's own code makes of ``speculators launch-vllm`` commands.

Reads ``{name: argv}`` (JSON, argv[1]) and prints a JSON report per command:
``vllm serve``'s argument parser and its post-parse validation, the
``KVTransferConfig`` the parser built, vLLM's own text config of the verifier
(``get_config`` + ``get_hf_text_config``, the nested layout included), the
``ExtractHiddenStatesConfig`` the ``extract_hidden_states`` method wraps that
config in, and ``EngineArgs.create_speculative_config`` against a target
``ModelConfig``. The target is a text-only stand-in written from vLLM's text
config: vLLM's multimodal classes import ``compressed_tensors`` / ``torchvision``,
which the scratch environment lacks, and the method reads only the target's config.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path


def _stand_in(text_config, scratch: Path) -> str:  # type: ignore[no-untyped-def]
    """A flat config.json of vLLM's text config, with a text-only architecture."""
    values = text_config.to_dict()
    if "kv_lora_rank" in values:
        values.update(model_type="deepseek_v3", architectures=["DeepseekV3ForCausalLM"])
    else:
        values.update(model_type="qwen2", architectures=["Qwen2ForCausalLM"])
    scratch.mkdir(parents=True)
    (scratch / "config.json").write_text(json.dumps(values))
    return str(scratch)


def probe(argv: list[str], scratch: Path) -> dict:
    from vllm.config import KVTransferConfig, ParallelConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.common.cli_args import (
        make_arg_parser,
        validate_parsed_serve_args,
    )
    from vllm.transformers_utils.config import get_config, get_hf_text_config
    from vllm.transformers_utils.configs.extract_hidden_states import (
        ExtractHiddenStatesConfig,
    )
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    assert argv[:2] == ["vllm", "serve"], argv
    # What `vllm serve` parses (vllm/entrypoints/cli/serve.py: make_arg_parser).
    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    args = parser.parse_args(argv[2:])
    validate_parsed_serve_args(args)
    kv = args.kv_transfer_config
    args.model = args.model_tag
    engine_args = AsyncEngineArgs.from_cli_args(args)

    nested = get_config(engine_args.model, trust_remote_code=False)
    text = get_hf_text_config(nested)
    hf_overrides = engine_args.speculative_config["draft_model_config"]["hf_config"]
    extract = ExtractHiddenStatesConfig(nested, **hf_overrides)

    engine_args.model = _stand_in(text, scratch)
    target = engine_args.create_model_config()
    spec = engine_args.create_speculative_config(target, ParallelConfig())
    draft_hf = spec.draft_model_config.hf_config
    return {
        "model_tag": args.model_tag,
        "kv_transfer_config_type": type(kv).__name__,
        "kv_is_producer": isinstance(kv, KVTransferConfig) and kv.is_kv_producer,
        "kv_connector": kv.kv_connector,
        "kv_connector_extra_config": kv.kv_connector_extra_config,
        "kv_connector_module_path": kv.kv_connector_module_path,
        "config_class": type(nested).__name__,
        "text_model_type": text.model_type,
        "text_num_hidden_layers": text.num_hidden_layers,
        "extract_config_layer_ids": list(extract.eagle_aux_hidden_state_layer_ids),
        "extract_config_architectures": list(extract.architectures),
        "extract_text_num_hidden_layers": get_hf_text_config(extract).num_hidden_layers,
        "spec_method": spec.method,
        "spec_num_speculative_tokens": spec.num_speculative_tokens,
        "spec_draft_config_class": type(draft_hf).__name__,
        "spec_layer_ids": list(draft_hf.eagle_aux_hidden_state_layer_ids),
        "target_num_hidden_layers": target.hf_text_config.num_hidden_layers,
        "remaining_args": {"max_model_len": args.max_model_len, "port": args.port},
    }


def main() -> None:
    commands = json.loads(Path(sys.argv[1]).read_text())
    with tempfile.TemporaryDirectory() as tmp:
        report = {
            name: probe(argv, Path(tmp) / name) for name, argv in commands.items()
        }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
