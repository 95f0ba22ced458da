"""Run by ``tests/upstream/test_vllm_kv_cache.py`` in the scratch vLLM 0.34.0
environment: does vLLM's own KV-cache planning give the ``extract_hidden_states``
cache layer a group that ``ExampleHiddenStatesConnector`` accepts, for an
all-MLA verifier shaped like Kimi-K2.5?

Reads ``{"text_config": ..., "layer_ids": [...], ...}`` (JSON, argv[1]) and prints
one JSON object per case as its last stdout line. Each case runs what vLLM 0.34
runs between loading the model and creating the scheduler (paths are relative to
``site-packages/vllm``):

- ``EngineArgs.create_engine_config`` (``engine/arg_utils.py:2920``) builds the real
  ``VllmConfig``: the verifier, ``--speculative-config {"method":
  "extract_hidden_states", ...}`` and ``--kv-transfer-config`` naming
  ``ExampleHiddenStatesConnector``;
- the draft is vLLM's own ``ExtractHiddenStatesModel``
  (``model_executor/models/extract_hidden_states.py:319``), whose
  ``CacheOnlyAttentionLayer`` reports a ``HiddenStateCacheSpec`` (``:306-313``),
  flagged as a draft layer as ``v1/worker/gpu/spec_decode/speculator.py:305`` does;
- the verifier's decoder layers are ``MLAAttention`` objects (see ``mla_layer``);
- ``Platform.update_block_size_for_backend`` (``platforms/interface.py:760``, called
  at ``v1/executor/uniproc_executor.py:75``) picks the block size;
- ``get_kv_cache_spec`` (``v1/worker/gpu/attn_utils.py:140``, the model runner's,
  ``v1/worker/gpu/model_runner.py:632``) collects the specs;
- the engine core's ``_initialize_kv_caches`` (``v1/engine/core.py:272-392``):
  ``resolve_kv_cache_layout``, ``get_global_kv_cache_groups``,
  ``get_kv_cache_configs`` (``v1/core/kv_cache_planning.py:1565``),
  ``generate_scheduler_kv_cache_config``, ``resolve_kv_cache_block_sizes``;
- the scheduler creates the connector (``v1/core/sched/scheduler.py:177``,
  ``KVConnectorFactory.create_connector``), whose ``__init__`` runs the group lookup
  that raises "Could not uniquely identify ..."
  (``distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py:120-144``);
  where it is accepted, the worker side too: ``allocate_kv_cache``
  (``v1/worker/utils.py:557``) and the connector's ``register_kv_caches``
  (``:300-327``).

No GPU: the platform is vLLM's ``UnspecifiedPlatform``, made to answer as CUDA
does where the KV cache depends on it (``stand_in_platform``).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any


def write_model(text_config: dict[str, Any], directory: Path) -> str:
    """A flat DeepSeek-V3 ``config.json`` of the verifier's text config.

    Kimi-K2.5's multimodal classes import packages the scratch environment lacks
    (as ``vllm_launch_probe.py`` notes); the KV cache depends only on the text model.
    """
    directory.mkdir(parents=True, exist_ok=True)
    values = {
        **text_config,
        "model_type": "deepseek_v3",
        "architectures": ["DeepseekV3ForCausalLM"],
        "torch_dtype": "bfloat16",
    }
    (directory / "config.json").write_text(json.dumps(values))
    return str(directory)


def make_vllm_config(
    model: str, layer_ids: list[int], case: dict[str, Any], max_model_len: int
) -> Any:
    """The real ``VllmConfig`` ``vllm serve`` builds for the extraction launch
    (``--tensor-parallel-size``, ``--decode-context-parallel-size`` and
    ``--disable-hybrid-kv-cache-manager`` from the case)."""
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(
        model=model,
        skip_tokenizer_init=True,
        max_model_len=max_model_len,
        tensor_parallel_size=case.get("tp", 1),
        decode_context_parallel_size=case.get("dcp", 1),
        disable_hybrid_kv_cache_manager=case.get("disable_hma"),
        speculative_config={
            "method": "extract_hidden_states",
            "num_speculative_tokens": 1,
            "draft_model_config": {
                "hf_config": {"eagle_aux_hidden_state_layer_ids": layer_ids}
            },
        },
        kv_transfer_config={
            "kv_connector": "ExampleHiddenStatesConnector",
            "kv_role": "kv_producer",
            "kv_connector_extra_config": {"shared_storage_path": tempfile.mkdtemp()},
        },
    )
    return args.create_engine_config()


def mla_layer(
    vllm_config: Any,
    prefix: str,
    backend: type,
    head_size: int,
    sliding_window: int | None,
) -> Any:
    """An ``MLAAttention`` carrying exactly what its ``get_kv_cache_spec``
    (``model_executor/layers/attention/mla_attention.py:1567-1599``) reads.

    ``MLAAttention.__init__`` also builds the kernel implementation and prefill
    backend, which need CUDA, so the attributes are set as ``__init__`` sets them
    (``:478-497``, ``:529-541``, ``:567``, ``:587-589``) and registered as at
    ``:658-661``; the spec then comes from vLLM's own method.
    """
    import torch.nn as nn
    from vllm.model_executor.layers.attention.mla_attention import MLAAttention

    layer = MLAAttention.__new__(MLAAttention)
    nn.Module.__init__(layer)
    layer.layer_name = prefix
    layer.head_size = head_size  # kv_lora_rank + qk_rope_head_dim (:490)
    layer.num_kv_heads = 1
    layer.kv_sharing_target_layer_name = None
    layer.indexer = None
    layer.non_causal_multi_token_decode = False
    layer.sliding_window = sliding_window
    layer.attn_backend = backend
    layer.kv_cache_dtype = vllm_config.cache_config.cache_dtype
    layer.topk_buffer_width = None
    context = vllm_config.compilation_config.static_forward_context
    assert prefix not in context, prefix
    context[prefix] = layer
    return layer


def build_model(vllm_config: Any, case: dict[str, Any], text: dict[str, Any]) -> Any:
    """Register the verifier's attention layers and vLLM's extraction draft."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.models.extract_hidden_states import (
        ExtractHiddenStatesModel,
    )

    backends = backend_classes()
    head_size = text["kv_lora_rank"] + text["qk_rope_head_dim"]
    window = case.get("sliding_window")
    for i in range(text["num_hidden_layers"]):
        windowed = window is not None and i % 2 == 1
        mla_layer(
            vllm_config,
            f"model.layers.{i}.self_attn.attn",
            backends[case["swa_backend" if windowed else "backend"]],
            head_size,
            window if windowed else None,
        )
    with set_current_vllm_config(vllm_config):
        draft = ExtractHiddenStatesModel(vllm_config=vllm_config, prefix="")
    for layer in draft.cache_only_layers.values():
        layer.is_draft_layer = True  # v1/worker/gpu/spec_decode/speculator.py:305
    return draft


def backend_classes() -> dict[str, type]:
    """MLA backends importable without CUDA: FlashMLA (one Hopper choice, kernel
    block 64) and Triton MLA (kernel blocks of 16, and sliding-window MLA)."""
    from vllm.v1.attention.backends.mla.flashmla import FlashMLABackend
    from vllm.v1.attention.backends.mla.triton_mla import TritonMLABackend

    return {"FLASHMLA": FlashMLABackend, "TRITON_MLA": TritonMLABackend}


def stand_in_platform() -> None:
    """Make vLLM's ``UnspecifiedPlatform`` (no GPU here) answer as CUDA does where
    the KV cache depends on it.

    ``vllm.platforms.cuda`` needs ``libcuda`` to import and the CPU platform
    refuses x86 without triton-cpu (``platforms/cpu.py:242``). Two answers differ
    from CUDA's: ``device_type`` (``""``, which ``DeviceConfig`` refuses,
    ``config/device.py:46-68``) and ``support_hybrid_kv_cache`` (``False``,
    ``platforms/interface.py:1366``; ``True`` for CUDA, ``platforms/cuda.py:724``),
    which ``VllmConfig`` turns into ``disable_hybrid_kv_cache_manager``
    (``config/vllm.py:2153-2155``). CUDA's ``check_and_update_config``
    (``platforms/cuda.py:367-407``) touches no KV-cache setting and CUDA keeps
    ``Platform``'s block-size choice (``update_block_size_for_backend``) and
    KV-cache builder.
    """
    from vllm.platforms import current_platform

    assert type(current_platform).__name__ == "UnspecifiedPlatform", current_platform
    current_platform.device_type = "cpu"
    current_platform.support_hybrid_kv_cache = lambda: True  # type: ignore[method-assign]


def init_single_rank() -> None:
    """A one-process gloo world, so the connector's ``register_kv_caches`` can ask
    ``get_tensor_model_parallel_rank`` (``example_hidden_states_connector.py:302``)."""
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed.parallel_state import (
        ensure_model_parallel_initialized,
        init_distributed_environment,
    )

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with set_current_vllm_config(VllmConfig()):
        init_distributed_environment(
            world_size=1,
            rank=0,
            distributed_init_method=f"tcp://127.0.0.1:{port}",
            local_rank=0,
            backend="gloo",
        )
        ensure_model_parallel_initialized(1, 1)


def spec_name(spec: Any) -> str:
    return type(spec).__name__


def describe_groups(groups: list[Any], hidden: str) -> list[dict[str, Any]]:
    """Each group of a worker's ``KVCacheConfig``: its spec type, block size and
    the types of its layers' specs (after any promotion by the planner)."""
    out = []
    for gid, group in enumerate(groups):
        layer_types: dict[str, int] = {}
        for name in group.layer_names:
            kind = spec_name(layer_spec(group, name))
            layer_types[kind] = layer_types.get(kind, 0) + 1
        out.append(
            {
                "group": gid,
                "spec": spec_name(group.kv_cache_spec),
                "num_layers": len(group.layer_names),
                "layer_specs": layer_types,
                "holds_hidden_state_layer": hidden in group.layer_names,
                "block_size": group.kv_cache_spec.block_size,
                "dcp_sharded": group.kv_cache_spec.dcp_sharded,
            }
        )
    return out


def layer_spec(group: Any, name: str) -> Any:
    """A layer's own spec inside its group (``kv_cache_planning.py:605-612``)."""
    spec = group.kv_cache_spec
    return spec.kv_cache_specs[name] if hasattr(spec, "kv_cache_specs") else spec


def billing(
    config: Any, pool_bytes_per_block: int, hidden_name: str, mla_name: str
) -> dict[str, Any]:
    """Bytes per block and per token of the hidden-state layer and of one MLA layer.

    ``data``: what the layer stores (heads x head size x dtype per token).
    ``billed``: what one block of the layer costs the KV pool. Every block ID takes
    ``pool_bytes_per_block`` (``kv_cache_planning.py:620-648``; ``:1668-1676``
    divides the memory by it), so a layer alone in its group is billed the whole
    block; a layer sharing a group is billed its own page in it. Per token: per
    token this rank stores (``block_size`` of them per block).
    """
    from vllm.utils.torch_utils import get_dtype_size

    out: dict[str, Any] = {"pool_bytes_per_block": pool_bytes_per_block}
    for key, name in (("hidden", hidden_name), ("mla", mla_name)):
        gid, group = next(
            (i, g)
            for i, g in enumerate(config.kv_cache_groups)
            if name in g.layer_names
        )
        spec = layer_spec(group, name)
        data_per_token = (
            spec.num_kv_heads
            * (spec.head_size + spec.head_size_v)
            * get_dtype_size(spec.dtype)
        )
        alone = len(group.layer_names) == 1
        billed = pool_bytes_per_block if alone else spec.page_size_bytes
        out[key] = {
            "layer": name,
            "group": gid,
            "alone_in_group": alone,
            "spec": spec_name(spec),
            "num_kv_heads": spec.num_kv_heads,
            "head_size": spec.head_size,
            "dtype": str(spec.dtype).removeprefix("torch."),
            "block_size": spec.block_size,
            "page_size_bytes": spec.page_size_bytes,
            "data_bytes_per_token": data_per_token,
            "data_bytes_per_block": data_per_token * spec.block_size,
            "billed_bytes_per_block": billed,
            "billed_bytes_per_token": billed // spec.block_size,
        }
    return out


def prompt_read(tokens: int, tokens_per_block: int, connector_block: int) -> dict:
    """How many cache rows the connector reads back for a ``tokens``-long prompt.

    The scheduler gives the request ``cdiv(tokens, tokens_per_block)`` blocks of
    the hidden-state group; ``_submit_async_write``
    (``example_hidden_states_connector.py:373-380``) reads ``connector_block``
    slots of each from this rank's cache and keeps the first ``tokens``
    (``extract_from_kv_cache``, ``:37-46``). This is that arithmetic, not a run.
    """
    blocks = -(-tokens // tokens_per_block)
    slots = blocks * connector_block
    return {
        "prompt_tokens": tokens,
        "blocks": blocks,
        "slots_read": slots,
        "rows_written": min(slots, tokens),
    }


def run_case(
    case: dict[str, Any], text: dict[str, Any], report: dict[str, Any], model: str
) -> dict[str, Any]:
    """One verifier shape through vLLM's planning and the connector's lookup."""
    from dataclasses import replace

    from vllm.config import set_current_vllm_config
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
    from vllm.distributed.kv_transfer.kv_connector.utils import (
        get_current_attn_backends,
    )
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from vllm.platforms import current_platform
    from vllm.v1.attention.backends.utils import (
        get_supported_kv_cache_layouts,
        resolve_kv_cache_layout,
    )
    from vllm.v1.core.kv_cache_config_builder import get_kv_cache_config_builder
    from vllm.v1.core.kv_cache_planning import (
        _pool_bytes_per_block_from_builder,
        get_global_kv_cache_groups,
        get_kv_cache_configs,
        is_kv_cache_spec_uniform,
    )
    from vllm.v1.core.kv_cache_utils import (
        generate_scheduler_kv_cache_config,
        get_max_concurrency_for_kv_cache_config,
        resolve_cache_hit_alignment_tokens,
        resolve_dcp_kv_block_size,
        resolve_kv_cache_block_sizes,
    )
    from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
    from vllm.v1.kv_cache_interface import UniformTypeKVCacheSpecs
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec

    tp, dcp = case.get("tp", 1), case.get("dcp", 1)
    vc = make_vllm_config(model, report["layer_ids"], case, report["max_model_len"])
    sched_cfg = vc.scheduler_config
    out: dict[str, Any] = {
        "tp": vc.parallel_config.tensor_parallel_size,
        "dcp": vc.parallel_config.decode_context_parallel_size,
        "hybrid_kv_cache_manager": not sched_cfg.disable_hybrid_kv_cache_manager,
    }
    with set_current_vllm_config(vc):
        draft = build_model(vc, case, text)
        (hidden_layer,) = draft.cache_only_layers.values()
        hidden = hidden_layer.layer_name
        current_platform.update_block_size_for_backend(vc)
        out["block_size"] = vc.cache_config.block_size
        specs = get_kv_cache_spec(vc)
        # v1/worker/gpu/model_runner.py:632-641: a draft at DCP 1 under a DCP
        # target keeps a replicated cache. The speculator's DCP is the target's
        # (v1/worker/gpu/spec_decode/speculator.py:208), so this never fires here.
        speculator_dcp = vc.parallel_config.decode_context_parallel_size
        if speculator_dcp == 1 and dcp > 1:
            specs[hidden] = replace(specs[hidden], dcp_sharded=False)
        # How get_kv_cache_groups (v1/core/kv_cache_planning.py:1157-1244) sees
        # them: its uniform checks (:1182-1187) come before it sets hidden-state
        # layers apart (:1190-1201).
        register_all_kvcache_specs(vc)  # v1/engine/core.py:277
        out["all_specs_equal"] = is_kv_cache_spec_uniform(dict(specs))
        out["all_specs_uniform_type"] = UniformTypeKVCacheSpecs.is_uniform_type(specs)
        # v1/engine/core.py:314-392, one spec dict per worker (TP ranks alike).
        per_worker = [dict(specs) for _ in range(tp)]
        backends = get_current_attn_backends(vc)
        supported = [x.name for x in get_supported_kv_cache_layouts(backends)]
        layout = resolve_kv_cache_layout(
            vc, [supported] * tp, [s for w in per_worker for s in w.values()]
        )
        out["kv_cache_layout"] = layout.name
        groups = get_global_kv_cache_groups(vc, per_worker)
        vc.adjust_dcp_kv_cache_interleave_size(groups)
        available = [report["available_memory"]] * tp
        configs = get_kv_cache_configs(vc, per_worker, available, groups)
        sched = generate_scheduler_kv_cache_config(configs)
        out["groups"] = describe_groups(configs[0].kv_cache_groups, hidden)
        out["scheduler_group_specs"] = [
            spec_name(g.kv_cache_spec) for g in sched.kv_cache_groups
        ]
        out["num_blocks"] = configs[0].num_blocks
        # Requests of max_model_len tokens the pool holds (kv_cache_utils.py:1082).
        out["max_model_len"] = vc.model_config.max_model_len
        out["max_concurrency"] = get_max_concurrency_for_kv_cache_config(vc, configs[0])
        builder = get_kv_cache_config_builder(vc)
        pool = _pool_bytes_per_block_from_builder(
            builder, vc, configs[0].kv_cache_groups
        )
        out["bytes"] = billing(
            configs[0], pool, hidden, "model.layers.0.self_attn.attn"
        )
        # core.py:362-396: the block sizes the scheduler then runs with.
        participating = [
            g.kv_cache_spec.block_size
            for g in sched.kv_cache_groups
            if g.kv_cache_spec.prefix_cacheable
        ]
        vc.cache_config.block_size = min(participating)
        out["engine_block_size"] = vc.cache_config.block_size
        vc.validate_block_size()  # core.py:386
        sched_bs, hash_bs = resolve_kv_cache_block_sizes(sched, vc)
        resolve_cache_hit_alignment_tokens(sched, vc, sched_bs, hash_bs)
        out["scheduler_block_size"], out["hash_block_size"] = sched_bs, hash_bs
        hidden_group = sched.kv_cache_groups[out["bytes"]["hidden"]["group"]]
        tokens_per_block = resolve_dcp_kv_block_size(hidden_group.kv_cache_spec, dcp)
        out["hidden_group_tokens_per_block"] = tokens_per_block
        out["mooncake_lookup"] = mooncake_lookup(sched)
        try:
            # v1/core/sched/scheduler.py:177-181
            connector = KVConnectorFactory.create_connector(
                vc, KVConnectorRole.SCHEDULER, sched
            )
        except Exception as exc:  # the answer being probed
            out["connector"] = {
                "accepted": False,
                "error_type": type(exc).__name__,
                "error": str(exc),
            }
            return out
        out["connector"] = {
            "accepted": True,
            "class": type(connector).__name__,
            "group": connector._cache_kv_group_id,
            "block_size": connector._block_size,
            "prompt_read": prompt_read(
                report["prompt_tokens"], tokens_per_block, connector._block_size
            ),
        }
        if dcp == 1:
            out["connector"]["worker"] = register_on_worker(
                vc, builder, configs[0], layout
            )
    return out


def mooncake_lookup(sched: Any) -> dict[str, Any]:
    """The same lookup in ``MooncakeHiddenStatesConnector`` (``hs_connectors``,
    ``--hidden-states-backend mooncake``), on the scheduler's config."""
    from hs_connectors.mooncake_hidden_states_connector import (
        MooncakeHiddenStatesConnector,
    )

    try:
        return {"group": MooncakeHiddenStatesConnector._find_cache_kv_group_id(sched)}
    except ValueError as exc:
        return {"error": str(exc)}


def register_on_worker(vc: Any, builder: Any, config: Any, layout: Any) -> dict:
    """The worker side: a 2-block cache laid out by vLLM, handed to
    ``register_kv_caches``, which checks the hidden layer's block size."""
    import torch
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from vllm.v1.worker.utils import allocate_kv_cache

    small = builder.get_kv_cache_config_from_groups(vc, config.kv_cache_groups, 2)
    caches = allocate_kv_cache(
        small,
        torch.device("cpu"),
        layout,
        allocate=lambda n: torch.zeros(n, dtype=torch.int8),
    )
    worker = KVConnectorFactory.create_connector(vc, KVConnectorRole.WORKER, small)
    try:
        worker.register_kv_caches(caches)
    except Exception as exc:
        return {"registered": False, "error": f"{type(exc).__name__}: {exc}"}
    return {
        "registered": True,
        "cache_layers": worker.cache_layers,
        "hidden_cache_shape": list(worker._kv_cache.shape),
        "block_size": worker._block_size,
    }


def main() -> None:
    report = json.loads(Path(sys.argv[1]).read_text())
    text = report["text_config"]
    stand_in_platform()
    init_single_rank()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        model = write_model(text, Path(tmp) / "verifier")
        for name, case in report["cases"].items():
            try:
                results[name] = run_case(case, text, report, model)
            except Exception as exc:
                results[name] = {
                    "probe_error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc()[-3000:],
                }
    print(json.dumps(results))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
