#!/usr/bin/env python3
"""Check an exported EAGLE-3 draft with vLLM's own code, on CPU.

    python tools/vllm_check.py EXPORT --checkpoint CKPT --verifier VERIFIER \
        [--env DIR] [--json OUT]

1. Builds (once) a scratch environment with the ``vllm`` 0.33.0 wheel installed
   without its dependencies, reusing this interpreter's site-packages (torch,
   transformers, speculators), plus the few pure-Python modules vLLM imports at
   module level (``VLLM_DEPS``, pinned). Nothing of vLLM is installed here.
2. In that environment, with ``HF_HUB_OFFLINE=1``:
   - vLLM's speculators parser (``SpeculatorsConfig.from_pretrained``) reads the
     export, and ``maybe_override_with_speculators`` (what ``vllm serve DIR``
     does first) accepts it and names the verifier; the original checkpoint is
     run through it too (it is refused, the message recorded);
   - the draft class the parsed config names (``Eagle3LlamaForCausalLM``) is
     built with a one-process gloo group and loads the export's tensors through
     its own ``load_weights``; every parameter starts as NaN, so one that no
     tensor reached is found (the embedding, absent from the export, is shared
     from the verifier as vLLM's proposer shares it);
   - one draft step over a prompt (the verifier's real aux hidden states,
     computed by ``speculators_kimi.evaluate``; with ``--synthetic-aux-states``
     states drawn at the verifier's width, no verifier decoder built): vLLM's
     ``combine_hidden_states``, ``forward`` and ``compute_logits`` against our
     ``DraftRunner`` on the trained checkpoint. Sized for a real export on a CPU
     box: ours stays in its stored dtype (mapped from the file) until vLLM's
     class has been loaded (tensors streamed one at a time), stepped and
     released; only then is ours upcast to float32 and stepped. Both embed
     through the prompt's rows of the embedding alone (``PromptRows``).

Stubbed, because it has no CPU implementation in a CUDA wheel: only vLLM's paged
``Attention`` layer (its KV cache and CUDA kernels), replaced by causal
``scaled_dot_product_attention`` over the step's tokens, honouring the layer's
sliding window. vLLM's compiled custom ops (``vllm._C``) are absent; its layers
run their ``forward_native`` paths. ``torch.compile`` is off.

An MLA export (native layout, ``Eagle3DeepseekV3ForCausalLM``; no
``speculators_config``) goes the way ``vllm serve VERIFIER --speculative-config
'{"model": EXPORT, "method": "eagle3"}'`` takes it instead:

- vLLM's own ``ModelConfig`` for the target and ``SpeculativeConfig`` for the
  draft: the draft ``ModelConfig`` (with the draft ``hf_overrides`` vLLM composes),
  its ``EAGLEConfig`` wrapper and architecture update, then ``VllmConfig`` over
  both. The target is a text-only stand-in of the verifier when the verifier is
  multimodal (its ``text_config`` and tokenizer in a scratch directory: vLLM's
  multimodal Kimi-K2.5 config needs an image processor the tiny verifier lacks;
  the draft only reads the target's size, dtype and tokenizer). Recorded: the
  parsed fields, ``draft_model_config.use_mla`` (MLA KV cache), the resolved
  class; the same export relabelled ``deepseek_v3`` is run through it too
  (vLLM 0.33 rewrites that into its MTP draft and refuses it, message recorded),
  and ``maybe_override_with_speculators`` on the export (``vllm serve EXPORT``:
  no speculative config, so that form cannot serve it);
- the class ``ModelRegistry`` resolves, built under that ``VllmConfig``,
  NaN-filled, loaded through its own ``load_weights``, and the one-step logits
  compared, as above.

Stubbed on that path, instead of ``Attention``: only vLLM's ``MLAAttention``
(``vllm.model_executor.layers.mla.MLAAttention``, the paged latent-cache attention
op inside ``MultiHeadLatentAttentionWrapper``; CUDA/ROCm backends only). The stub
computes what its prefill path computes, in plain PyTorch: ``k_nope, v`` from the
module's own ``kv_b_proj`` over ``kv_c_normed``, ``k = cat(k_nope, k_pe)`` with
``k_pe`` shared by every head, causal ``scaled_dot_product_attention`` with the
module's own softmax ``scale``, output ``[tokens, heads * v_head_dim]``. vLLM's
q/kv down-projections (fused ``fused_qkv_a_proj``), latent RMSNorms, ``q_b_proj``,
interleaved rotary embedding, ``o_proj``, MLP, norms, ``fc`` and ``lm_head`` run
as vLLM's code.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from vllmcheck.env import default_env, ensure_env  # tools/ (this script's directory)

from speculators_kimi.cli_args import save_json_report


def inner(args: argparse.Namespace) -> dict:
    """The check for the export's layout (speculators format, or native MLA)."""
    from vllmcheck.native_mla import check_native_mla
    from vllmcheck.speculators_layout import check_speculators_layout

    config = json.loads((Path(args.export) / "config.json").read_text())
    if "speculators_config" in config:
        return check_speculators_layout(args)
    return check_native_mla(args, config)


def _memory() -> dict:
    """The check's own memory: peak resident (VmHWM) and anonymous (RssAnon) now."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "RssAnon"):
            fields[key] = int(value.split()[0]) * 1024
    return {
        "vm_hwm_bytes": fields.get("VmHWM"),
        "rss_anon_bytes": fields.get("RssAnon"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("export", help="directory written by speculators-kimi export")
    parser.add_argument("--checkpoint", required=True, help="the trained checkpoint")
    parser.add_argument("--verifier", required=True, help="local verifier directory")
    parser.add_argument(
        "--env",
        type=Path,
        default=None,
        help="the scratch environment (default: one under ~/.cache/speculators-kimi "
        "for this vLLM version and this environment)",
    )
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument(
        "--synthetic-aux-states",
        action="store_true",
        help="feed both drafts aux states drawn at the verifier's width instead of "
        "running the verifier's decoder (a real-size verifier does not fit a CPU "
        "box): proves the export's parsing, loading and the draft's own step, "
        "not the verifier's capture",
    )
    parser.add_argument(
        "--num-speculative-tokens",
        type=int,
        default=3,
        help="for an MLA export: the speculative config's num_speculative_tokens",
    )
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        report = inner(args)
        report["memory"] = _memory()
        print(json.dumps(report))
        return 0
    python = ensure_env(args.env or default_env())
    t0 = time.perf_counter()
    proc = subprocess.run(
        [str(python), __file__, "--inner", *sys.argv[1:]],
        env=dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-6000:])
        return proc.returncode
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    report["check_seconds"] = round(time.perf_counter() - t0, 1)
    save_json_report(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
