"""The block vLLM's XPress speculator drafts, from its own Triton kernels on CPU:
``python -m speculators_kimi.vllm_check.xpress_kernels INPUTS.pt`` prints the
block as one JSON list.

vLLM's wheel has no CPU path for ``XPressRefinerHead.jacobi_refine_greedy``:
its kernels need Triton, which vLLM replaces with placeholders when no GPU
driver is active. Triton's interpreter runs them on CPU, but only when
``TRITON_INTERPRET=1`` is set before Triton is first imported (its own
``@jit`` helpers, such as ``tl.sigmoid``, are built then), so this runs in a
process of its own (:func:`.xpress._vllm_jacobi`), with Triton put back in
``vllm.triton_utils`` before vLLM's kernel module is imported.

The head is vLLM's class, built from the export's config and loaded from its
``xpress_head.*`` tensors the way ``Qwen3XPressForCausalLM.load_weights`` maps
them (``HYBRID_KEY_MAP``, the raw mixer folded by ``fold_from_raw_``); the
inputs are the base logits and final hidden states of vLLM's own block step.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["main"]

_PREFIX = "xpress_head."


def _head(export: Path, config: dict[str, Any]):  # type: ignore[no-untyped-def]
    import torch
    from safetensors import safe_open
    from vllm.model_executor.models.qwen3_xpress import XPressRefinerHead

    head = XPressRefinerHead(
        vocab_size=config["vocab_size"],
        hidden_size=config["hidden_size"],
        block_size=config["xpress_block_size"],
        rank=config["xpress_rank"],
        mlp_hidden=config["xpress_mlp_hidden"],
        max_num_reqs=1,
        topc=config["xpress_topc"],
    )
    # the refiner's tensors only (the draft's layers are GBs at Kimi-K2.5 size)
    with safe_open(str(export / "model.safetensors"), "pt") as tensors:
        mine = {
            k[len(_PREFIX) :]: tensors.get_tensor(k)
            for k in tensors.keys()  # noqa: SIM118 (safe_open is not iterable)
            if k.startswith(_PREFIX)
        }
    raw_mix = mine.pop("mix.L")
    state = {XPressRefinerHead.HYBRID_KEY_MAP.get(k, k): v for k, v in mine.items()}
    state["mix_L"] = head.mix_L.detach().clone()  # filled by the fold below
    head.load_state_dict(state, strict=True)
    head.fold_from_raw_(raw_mix.to(head.mix_L.dtype))
    head = head.to(torch.float32).eval()
    head.process_weights_after_loading()  # the kernels' transposed copies
    return head


def main(argv: list[str]) -> int:
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("run with TRITON_INTERPRET=1 (see the module)")
    import triton
    import triton.language as tl
    import vllm.triton_utils as triton_utils

    triton_utils.triton, triton_utils.tl, triton_utils.HAS_TRITON = triton, tl, True

    import torch

    inputs = torch.load(argv[0])
    export = Path(inputs["export"])
    config = json.loads((export / "config.json").read_text())
    head = _head(export, config)
    anchor = torch.tensor([int(inputs["anchor"])])
    with torch.no_grad():
        block, _ = head.jacobi_refine_greedy(
            inputs["base"][None].float(),
            inputs["hidden"][None].float(),
            anchor,
            anchor,
            int(config["xpress_num_passes"]),
        )
    print(json.dumps([int(t) for t in block[0]]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
