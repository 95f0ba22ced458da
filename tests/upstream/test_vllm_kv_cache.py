"""Where vLLM 0.34 keeps Kimi-K2.5's extracted hidden states, and whether its
``ExampleHiddenStatesConnector`` accepts that (docs/kimi-k25-kv-cache.md).

One subprocess in the scratch vLLM 0.34.0 environment runs
``tests/support/vllm_kv_cache_probe.py``: vLLM's own ``VllmConfig`` for the
``extract_hidden_states`` launch, its ``ExtractHiddenStatesModel`` cache layer,
``MLAAttention.get_kv_cache_spec`` for every decoder layer, the engine core's
KV-cache planning and the connector's group lookup, for

- ``kimi_k25``: Kimi-K2.5's text model (61 MLA layers, kv_lora_rank 512,
  qk_rope_head_dim 64, bf16) on one GPU;
- ``kimi_k25_dcp8``: the same at ``--tensor-parallel-size 8
  --decode-context-parallel-size 8``;
- ``mla_swa_hybrid``: every other layer sliding-window MLA (DeepSeek-V4's mix);
- ``mla_swa_hybrid_no_hma``: that with ``--disable-hybrid-kv-cache-manager``.

The expected sizes below come from the inputs (layers, heads, widths); the group
layouts, block sizes and the connector's answers are vLLM's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from helpers import SUPPORT, run
from speculators.utils.target_layers import default_target_layer_ids

from speculators_kimi.tiny_verifier.configs import KIMI_K25_TEXT
from speculators_kimi.vllm_check.env import default_env, ensure_env

VLLM = "0.34.0"
CASES = {
    "kimi_k25": {"backend": "FLASHMLA"},
    "kimi_k25_dcp8": {"backend": "FLASHMLA", "tp": 8, "dcp": 8},
    "mla_swa_hybrid": {
        "backend": "FLASHMLA",
        "swa_backend": "TRITON_MLA",
        "sliding_window": 128,
    },
    "mla_swa_hybrid_no_hma": {
        "backend": "FLASHMLA",
        "swa_backend": "TRITON_MLA",
        "sliding_window": 128,
        "disable_hma": True,
    },
}
PROMPT = 1000
BF16 = 2


def _probe(tmp_path: Path, layer_ids: list[int]) -> dict:
    request = tmp_path / "request.json"
    request.write_text(
        json.dumps(
            {
                "text_config": KIMI_K25_TEXT,
                "layer_ids": layer_ids,
                "max_model_len": 8192,
                "available_memory": 32 << 30,
                "prompt_tokens": PROMPT,
                "cases": CASES,
            }
        )
    )
    python = ensure_env(default_env(VLLM), VLLM)
    proc = run(
        [str(python), str(SUPPORT / "vllm_kv_cache_probe.py"), str(request)],
        env={"HF_HUB_OFFLINE": "1", "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
        timeout=600,
    )
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, case in report.items():
        assert "probe_error" not in case, (name, case)
    return report


def test_kimi_k25_hidden_states_kv_cache_groups(tmp_path):
    n, width = KIMI_K25_TEXT["num_hidden_layers"], KIMI_K25_TEXT["hidden_size"]
    # What `speculators launch-vllm` passes: three aux layers and the last.
    layer_ids = [*default_target_layer_ids(n), n]
    got = _probe(tmp_path, layer_ids)

    hidden_token = len(layer_ids) * width * BF16
    mla_token = (
        KIMI_K25_TEXT["kv_lora_rank"] + KIMI_K25_TEXT["qk_rope_head_dim"]
    ) * BF16
    mixed = {"MLAAttentionSpec": n, "HiddenStateCacheSpec": 1}

    # (a) Pure MLA: the hidden-state layer joins the MLA layers in one group, which
    # the connector's lookup accepts (no HiddenStateCacheSpec group, one group).
    kimi = got["kimi_k25"]
    bs = kimi["block_size"]
    assert kimi["hybrid_kv_cache_manager"] is True
    assert kimi["all_specs_uniform_type"] is True
    assert [(g["spec"], g["layer_specs"]) for g in kimi["groups"]] == [
        ("UniformTypeKVCacheSpecs", mixed)
    ]
    assert kimi["scheduler_group_specs"] == ["MLAAttentionSpec"]
    connector = kimi["connector"]
    assert connector["accepted"] is True
    assert (connector["group"], connector["block_size"]) == (0, bs)
    assert kimi["mooncake_lookup"] == {"group": 0}
    worker = connector["worker"]
    assert worker["registered"] is True
    assert worker["cache_layers"] == [f"cache_only_layers.{n}"]
    assert worker["hidden_cache_shape"] == [2, len(layer_ids), bs, width]
    assert connector["prompt_read"]["rows_written"] == PROMPT
    # Billed what it stores: 56 KiB a token, next to 61 x 1152 B for the verifier.
    hidden, mla = kimi["bytes"]["hidden"], kimi["bytes"]["mla"]
    assert hidden["data_bytes_per_token"] == hidden_token == 57344
    assert hidden["billed_bytes_per_token"] == hidden_token
    assert mla["billed_bytes_per_token"] == mla["data_bytes_per_token"] == mla_token
    assert kimi["bytes"]["pool_bytes_per_block"] == bs * (n * mla_token + hidden_token)

    # (b) DCP 8: still one group and accepted, but the group's blocks span 8 x 64
    # tokens split over the DCP ranks, while the connector reads 64 rows a block
    # from rank 0 alone: 128 rows for a 1000-token prompt (arithmetic, not a run).
    dcp = got["kimi_k25_dcp8"]
    assert (dcp["tp"], dcp["dcp"]) == (8, 8)
    assert [(g["spec"], g["layer_specs"]) for g in dcp["groups"]] == [
        ("UniformTypeKVCacheSpecs", mixed)
    ]
    assert dcp["groups"][0]["dcp_sharded"] is True
    assert dcp["connector"]["accepted"] is True
    assert dcp["connector"]["group"] == 0
    assert dcp["hidden_group_tokens_per_block"] == 8 * dcp["connector"]["block_size"]
    read = dcp["connector"]["prompt_read"]
    assert read["rows_written"] == -(-PROMPT // (8 * bs)) * bs < PROMPT
    assert dcp["bytes"]["hidden"]["billed_bytes_per_token"] == hidden_token

    # (c) MLA + sliding-window MLA with the hybrid manager: vLLM 0.34 gives the
    # hidden-state layer a group of its own (accepted, no refusal), with 1-token
    # blocks that each take a whole pool block: ~40x what it stores.
    hybrid = got["mla_swa_hybrid"]
    assert [(g["spec"], g["layer_specs"]) for g in hybrid["groups"]] == [
        ("MLAAttentionSpec", {"MLAAttentionSpec": 31}),
        ("SlidingWindowMLASpec", {"SlidingWindowMLASpec": 30}),
        ("HiddenStateCacheSpec", {"HiddenStateCacheSpec": 1}),
    ]
    assert hybrid["connector"]["accepted"] is True
    assert (hybrid["connector"]["group"], hybrid["connector"]["block_size"]) == (2, 1)
    assert hybrid["mooncake_lookup"] == {"group": 2}
    assert hybrid["connector"]["worker"]["hidden_cache_shape"] == [
        2,
        len(layer_ids),
        1,
        width,
    ]
    h = hybrid["bytes"]["hidden"]
    assert (h["alone_in_group"], h["block_size"]) == (True, 1)
    assert h["billed_bytes_per_block"] == hybrid["bytes"]["pool_bytes_per_block"]
    assert h["billed_bytes_per_token"] == 31 * bs * mla_token
    assert h["billed_bytes_per_token"] > 30 * h["data_bytes_per_token"]
    assert hybrid["max_concurrency"] * 10 < kimi["max_concurrency"]

    # ... and without it, sliding-window layers become MLA layers and the
    # hidden-state layer is billed as in (a).
    flat = got["mla_swa_hybrid_no_hma"]
    assert flat["hybrid_kv_cache_manager"] is False
    assert [(g["spec"], g["layer_specs"]) for g in flat["groups"]] == [
        ("UniformTypeKVCacheSpecs", mixed)
    ]
    assert flat["connector"]["accepted"] is True
    assert flat["bytes"]["hidden"]["billed_bytes_per_token"] == hidden_token
    assert flat["max_concurrency"] == kimi["max_concurrency"]
