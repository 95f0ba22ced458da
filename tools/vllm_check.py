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
     computed by ``speculators_kimi.evaluate``): vLLM's ``combine_hidden_states``,
     ``forward`` and ``compute_logits`` against our ``DraftRunner`` on the
     trained checkpoint.

Stubbed, because it has no CPU implementation in a CUDA wheel: only vLLM's paged
``Attention`` layer (its KV cache and CUDA kernels), replaced by causal
``scaled_dot_product_attention`` over the step's tokens, honouring the layer's
sliding window. vLLM's compiled custom ops (``vllm._C``) are absent; its layers
run their ``forward_native`` paths. ``torch.compile`` is off.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

VLLM_VERSION = "0.33.0"
#: What ``vllm.model_executor.models.llama_eagle3`` imports beyond our test venv.
VLLM_DEPS = [
    "apache-tvm-ffi==0.1.15.post2",
    "cachetools==8.0.2",
    "cbor2==6.3.0",
    "cloudpickle==3.1.3",
    "einops==0.8.2",
    "fastapi==0.165.0",
    "llguidance==1.9.1",
    "msgspec==0.23.0",
    "openai-harmony==0.0.8",
    "opentelemetry-api==1.45.2",
    "opentelemetry-sdk==1.45.2",
    "opentelemetry-semantic-conventions==0.66b2",
    "partial-json-parser==0.2.1.1.post7",
    "prometheus-client==0.26.0",
    "py-cpuinfo==9.0.0",
    "pybase64==1.5.1",
    "pyzmq==27.3.0",
    "starlette==1.10.0",
    "uvloop==0.23.0",
    "xgrammar==0.2.9",
]


def default_env() -> Path:
    """One scratch environment per vLLM version and base environment: it runs on
    the base's site-packages, so another venv gets its own."""
    base = hashlib.sha256(sys.prefix.encode()).hexdigest()[:12]
    return Path.home() / ".cache" / "speculators-kimi" / f"vllm-{VLLM_VERSION}-{base}"


def _say(msg: str) -> None:
    print(f"[vllm-check] {msg}", file=sys.stderr, flush=True)


def _env_python(env: Path) -> Path:
    return env / "bin" / "python"


def ensure_env(env: Path) -> Path:
    """The scratch environment's python, built on first use (``.ready`` marks it)."""
    python = _env_python(env)
    ready = env / ".ready"
    stamp = f"{VLLM_VERSION} {sys.prefix}\n"
    if ready.is_file() and ready.read_text() == stamp:
        return python
    import site
    import sysconfig

    t0 = time.perf_counter()
    _say(f"building {env} (vllm {VLLM_VERSION} without dependencies)")
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", "--clear", str(env)],
        check=True,
    )
    purelib = Path(
        subprocess.run(
            [
                str(python),
                "-c",
                "import sysconfig; print(sysconfig.get_path('purelib'))",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # addsitedir (not a bare path) so the editable install's .pth files apply.
    ours = [sysconfig.get_path("purelib"), *site.getsitepackages()]
    lines = [f"import site; site.addsitedir({p!r})" for p in dict.fromkeys(ours)]
    (purelib / "speculators_kimi_base.pth").write_text("\n".join(lines) + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
    subprocess.run([*pip, "--no-deps", f"vllm=={VLLM_VERSION}", *VLLM_DEPS], check=True)
    ready.write_text(stamp)
    _say(f"built in {time.perf_counter() - t0:.0f} s")
    return python


# ----------------------------------------------------------------- inside the env


def _stub_attention() -> None:
    """vLLM's paged Attention -> causal SDPA over the step (sliding window kept)."""
    import torch
    import vllm.model_executor.models.llama as vllm_llama

    class SdpaAttention(torch.nn.Module):
        def __init__(
            self,
            num_heads: int,
            head_size: int,
            scale: float,
            num_kv_heads: int | None = None,
            per_layer_sliding_window: int | None = None,
            **_: object,
        ) -> None:
            super().__init__()
            self.heads, self.size, self.scale = num_heads, head_size, scale
            self.kv_heads = num_kv_heads or num_heads
            self.window = per_layer_sliding_window

        def forward(self, q, k, v):  # type: ignore[no-untyped-def]
            n = q.shape[0]
            q = q.view(n, self.heads, self.size).transpose(0, 1)
            k = k.view(n, self.kv_heads, self.size).transpose(0, 1)
            v = v.view(n, self.kv_heads, self.size).transpose(0, 1)
            i = torch.arange(n)
            mask = i[None, :] <= i[:, None]
            if self.window:
                mask &= i[:, None] - i[None, :] < self.window
            out = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, scale=self.scale, enable_gqa=True
            )
            return out.transpose(0, 1).reshape(n, -1)

    vllm_llama.Attention = SdpaAttention  # type: ignore[misc]


def _build_draft(hf_config, target_layers: int, target_vocab: int):  # type: ignore[no-untyped-def]
    import types

    import torch
    from vllm.config import (
        CompilationMode,
        DeviceConfig,
        VllmConfig,
        set_current_vllm_config,
    )
    from vllm.distributed import (
        init_distributed_environment,
        initialize_model_parallel,
    )
    from vllm.model_executor.models.registry import ModelRegistry

    config = VllmConfig(device_config=DeviceConfig(device="cpu"))
    config.compilation_config.mode = CompilationMode.NONE
    # The two configs the draft reads: its own, and the target's size.
    config.speculative_config = types.SimpleNamespace(  # type: ignore[assignment]
        draft_model_config=types.SimpleNamespace(
            hf_config=hf_config, quantization=None
        ),
        parallel_drafting=False,
    )
    config.model_config = types.SimpleNamespace(  # type: ignore[assignment]
        get_total_num_hidden_layers=lambda: target_layers,
        get_vocab_size=lambda: target_vocab,
        dtype=torch.float32,
        head_dtype=torch.float32,
        is_moe=False,
    )
    with set_current_vllm_config(config):
        init_distributed_environment(
            world_size=1,
            rank=0,
            local_rank=0,
            distributed_init_method="tcp://127.0.0.1:29577",
            backend="gloo",
        )
        initialize_model_parallel(1, 1)
        arch = hf_config.architectures[0]
        # The registry's own resolution, for the architecture the parser wrote.
        picker = types.SimpleNamespace(model_impl="vllm", convert_type="none")
        cls, _ = ModelRegistry.resolve_model_cls([arch], model_config=picker)
        return cls(vllm_config=config), arch, config


def inner(args: argparse.Namespace) -> dict:
    import torch
    from safetensors.torch import load_file
    from transformers import DynamicCache
    from vllm.transformers_utils.config import maybe_override_with_speculators
    from vllm.transformers_utils.configs.speculators.base import SpeculatorsConfig

    from speculators_kimi.evaluate import DraftRunner, load_draft
    from speculators_kimi.evaluate.verifier import load_causal_verifier

    report: dict = {"vllm": VLLM_VERSION}
    hf_config = SpeculatorsConfig.from_pretrained(args.export)
    report["parsed"] = {
        key: getattr(hf_config, key, None)
        for key in (
            "architectures",
            "model_type",
            "draft_vocab_size",
            "vocab_size",
            "hidden_size",
            "head_dim",
            "num_attention_heads",
            "num_key_value_heads",
            "target_hidden_size",
            "eagle_aux_hidden_state_layer_ids",
            "norm_before_fc",
            "norm_before_residual",
            "norm_output",
            "fc_norm",
        )
    }
    model, tokenizer, spec = maybe_override_with_speculators(args.export, None, False)
    report["serve"] = {"model": model, "tokenizer": tokenizer, "speculative": spec}
    try:
        maybe_override_with_speculators(args.checkpoint, None, False)
        report["checkpoint_refused"] = None
    except ValueError as err:
        report["checkpoint_refused"] = str(err)

    ours = load_draft(args.checkpoint, torch.float32, args.verifier)
    verifier = load_causal_verifier(args.verifier, ours.target_layer_ids)
    _stub_attention()
    torch.set_default_dtype(torch.float32)
    draft, arch, config = _build_draft(
        hf_config,
        int(verifier.text_config.num_hidden_layers),
        int(verifier.text_config.vocab_size),
    )
    report["draft_class"] = arch
    with torch.no_grad():
        for p in draft.parameters():
            p.fill_(float("nan")) if p.is_floating_point() else p.fill_(-1)
    tensors = load_file(str(Path(args.export) / "model.safetensors"))
    from vllm.config import set_current_vllm_config

    with set_current_vllm_config(config):
        draft.load_weights(iter(tensors.items()))
    shared = []
    if "embed_tokens.weight" not in tensors:  # vLLM's proposer shares the target's
        with torch.no_grad():
            draft.model.embed_tokens.weight.copy_(ours.embed_tokens.weight)
        shared.append("model.embed_tokens.weight")
    unloaded = [
        name
        for name, p in draft.named_parameters()
        if (p.isnan().any() if p.is_floating_point() else (p < 0).all())
    ]
    report["tensors"] = sorted(tensors)
    report["shared_from_verifier"] = shared
    report["parameters_not_loaded"] = unloaded

    gen = torch.Generator().manual_seed(0)
    vocab = int(verifier.text_config.vocab_size)
    prompt = torch.randint(0, vocab, (args.tokens,), generator=gen).tolist()
    _, aux = verifier.forward(prompt, DynamicCache())
    ids = torch.tensor(prompt[1:])
    with torch.no_grad(), set_current_vllm_config(config):
        states = draft.combine_hidden_states(aux[:-1])
        # vLLM runs the pair (x[j+1], g[j]) at the target's position j.
        hidden, _ = draft(ids, torch.arange(len(prompt) - 1), states)
        theirs = draft.compute_logits(hidden).float()
    runner = DraftRunner(ours, "cpu")
    _, logits = runner.step(ids, runner.project(aux[:-1]), 1)
    mine = logits.new_full((logits.shape[0], vocab), float("-inf"))
    mine[:, runner.draft_to_target] = logits
    finite = torch.isfinite(mine)
    report["one_step"] = {
        "tokens": len(prompt) - 1,
        "max_abs_logit_diff": float((theirs[finite] - mine[finite]).abs().max()),
        "same_masked_tokens": bool(torch.equal(finite, torch.isfinite(theirs))),
        "same_argmax": bool(torch.equal(theirs.argmax(-1), mine.argmax(-1))),
    }
    return report


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
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        print(json.dumps(inner(args)))
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
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
