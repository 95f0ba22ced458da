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


#: What the MLA path replaces, for the JSON report.
MLA_STUB = (
    "vllm.model_executor.layers.mla.MLAAttention (the paged MLA attention op) -> "
    "plain PyTorch: k_nope, v = kv_b_proj(kv_c_normed) (the module's own), "
    "k = cat(k_nope, k_pe), causal scaled_dot_product_attention at the module's "
    "own scale; the rest of MultiHeadLatentAttentionWrapper is vLLM's"
)


def _stub_mla_attention() -> None:
    """vLLM's ``MLAAttention`` -> the same math (its MHA/prefill form) in PyTorch."""
    import torch
    import vllm.model_executor.layers.mla as vllm_mla

    class SdpaMLAAttention(torch.nn.Module):
        def __init__(
            self,
            num_heads: int,
            scale: float,
            qk_nope_head_dim: int,
            qk_rope_head_dim: int,
            v_head_dim: int,
            kv_b_proj: torch.nn.Module,
            **_: object,
        ) -> None:
            super().__init__()
            self.heads, self.scale = num_heads, scale
            self.nope, self.rope, self.v = (
                qk_nope_head_dim,
                qk_rope_head_dim,
                v_head_dim,
            )
            self.kv_b_proj = kv_b_proj  # as vLLM's MLAAttention holds it

        def forward(self, q, kv_c_normed, k_pe, output_shape=None, **_):  # type: ignore[no-untyped-def]
            n = q.shape[0]
            kv = self.kv_b_proj(kv_c_normed)[0].view(n, self.heads, self.nope + self.v)
            k_nope, v = kv.split([self.nope, self.v], dim=-1)
            k = torch.cat([k_nope, k_pe.expand(n, self.heads, self.rope)], dim=-1)
            q = q.view(n, self.heads, self.nope + self.rope)
            out = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(0, 1),
                k.transpose(0, 1),
                v.transpose(0, 1),
                is_causal=True,
                scale=self.scale,
            )
            return out.transpose(0, 1).reshape(output_shape or (n, -1))

    vllm_mla.MLAAttention = SdpaMLAAttention  # type: ignore[misc]


def _init_single_process() -> None:
    """vLLM's distributed state for one CPU process (gloo, no parallelism)."""
    from vllm.distributed import (
        init_distributed_environment,
        initialize_model_parallel,
    )

    init_distributed_environment(
        world_size=1,
        rank=0,
        local_rank=0,
        distributed_init_method="tcp://127.0.0.1:29577",
        backend="gloo",
    )
    initialize_model_parallel(1, 1)


def _build_draft(hf_config, target_layers: int, target_vocab: int):  # type: ignore[no-untyped-def]
    import types

    import torch
    from vllm.config import (
        CompilationMode,
        DeviceConfig,
        VllmConfig,
        set_current_vllm_config,
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
        _init_single_process()
        arch = hf_config.architectures[0]
        # The registry's own resolution, for the architecture the parser wrote.
        picker = types.SimpleNamespace(model_impl="vllm", convert_type="none")
        cls, _ = ModelRegistry.resolve_model_cls([arch], model_config=picker)
        return cls(vllm_config=config), arch, config


def _load_and_check(draft, config, tensors: dict, ours) -> dict:  # type: ignore[no-untyped-def]
    """NaN-fill ``draft``, load ``tensors`` with its ``load_weights``, share the
    verifier's embedding when the export has none; what no tensor reached."""
    import torch
    from vllm.config import set_current_vllm_config

    with torch.no_grad():
        for p in draft.parameters():
            p.fill_(float("nan")) if p.is_floating_point() else p.fill_(-1)
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
    return {
        "tensors": sorted(tensors),
        "shared_from_verifier": shared,
        "parameters_not_loaded": unloaded,
    }


def _one_step(draft, config, ours, verifier, tokens: int) -> dict:  # type: ignore[no-untyped-def]
    """One draft step over a prompt: vLLM's draft against our DraftRunner."""
    import torch
    from transformers import DynamicCache
    from vllm.config import set_current_vllm_config

    from speculators_kimi.evaluate import DraftRunner

    gen = torch.Generator().manual_seed(0)
    vocab = int(verifier.text_config.vocab_size)
    prompt = torch.randint(0, vocab, (tokens,), generator=gen).tolist()
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
    return {
        "tokens": len(prompt) - 1,
        "max_abs_logit_diff": float((theirs[finite] - mine[finite]).abs().max()),
        "same_masked_tokens": bool(torch.equal(finite, torch.isfinite(theirs))),
        "same_argmax": bool(torch.equal(theirs.argmax(-1), mine.argmax(-1))),
    }


def inner(args: argparse.Namespace) -> dict:
    """The check for the export's layout (speculators format, or native MLA)."""
    config = json.loads((Path(args.export) / "config.json").read_text())
    if "speculators_config" in config:
        return _inner_speculators(args)
    return _inner_native_mla(args, config)


def _inner_speculators(args: argparse.Namespace) -> dict:
    import torch
    from safetensors.torch import load_file
    from vllm.transformers_utils.config import maybe_override_with_speculators
    from vllm.transformers_utils.configs.speculators.base import SpeculatorsConfig

    from speculators_kimi.evaluate import load_draft
    from speculators_kimi.verifier.causal import load_causal_verifier

    report: dict = {"vllm": VLLM_VERSION, "layout": "speculators"}
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
    report["stubbed"] = "vllm.model_executor.models.llama.Attention -> causal SDPA"
    torch.set_default_dtype(torch.float32)
    draft, arch, config = _build_draft(
        hf_config,
        int(verifier.text_config.num_hidden_layers),
        int(verifier.text_config.vocab_size),
    )
    report["draft_class"] = arch
    tensors = load_file(str(Path(args.export) / "model.safetensors"))
    report.update(_load_and_check(draft, config, tensors, ours))
    report["one_step"] = _one_step(draft, config, ours, verifier, args.tokens)
    return report


def _text_target(verifier: str, scratch: Path) -> tuple[str, str | None]:
    """The target directory vLLM's ``ModelConfig`` reads: the verifier itself, or
    for a multimodal one a text-only stand-in (its ``text_config``, its tokenizer
    files; no weights: only the config is read)."""
    import shutil

    config = json.loads((Path(verifier) / "config.json").read_text())
    text = config.get("text_config")
    if not text:
        return verifier, None
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / "config.json").write_text(json.dumps(text, indent=2))
    for item in Path(verifier).iterdir():
        if item.is_file() and (
            item.name.startswith(("tokenizer", "special_tokens", "chat_template"))
            or item.suffix in (".model", ".tiktoken")
        ):
            shutil.copy2(item, scratch / item.name)
    why = (
        f"text-only stand-in of {verifier} ({config.get('architectures')}): its "
        f"text_config ({text.get('architectures')}, model_type "
        f"{text.get('model_type')}) and tokenizer"
    )
    return str(scratch), why


def _speculative_config(target, draft_dir: str, k: int):  # type: ignore[no-untyped-def]
    from vllm.config import ParallelConfig, SpeculativeConfig

    return SpeculativeConfig(
        model=draft_dir,
        method="eagle3",
        num_speculative_tokens=k,
        target_model_config=target,
        target_parallel_config=ParallelConfig(),
    )


def _inner_native_mla(args: argparse.Namespace, exported: dict) -> dict:
    import shutil
    import tempfile

    import torch
    from safetensors.torch import load_file
    from speculators.models.eagle3.model_definitions import MLA_FIELDS
    from vllm.config import (
        CompilationConfig,
        CompilationMode,
        DeviceConfig,
        ModelConfig,
        VllmConfig,
        set_current_vllm_config,
    )
    from vllm.model_executor.models.registry import ModelRegistry

    from speculators_kimi.evaluate import load_draft
    from speculators_kimi.verifier.causal import load_causal_verifier

    report: dict = {"vllm": VLLM_VERSION, "layout": "native"}
    scratch = Path(tempfile.mkdtemp(prefix="vllm-check-"))
    try:
        target_dir, stand_in = _text_target(args.verifier, scratch / "target")
        report["target_config"] = stand_in or args.verifier
        target = ModelConfig(model=target_dir, dtype="float32")
        k = int(args.num_speculative_tokens)
        # What `vllm serve VERIFIER --speculative-config {"model": EXPORT,
        # "method": "eagle3", ...}` builds for the draft.
        spec = _speculative_config(target, args.export, k)
        draft_config = spec.draft_model_config
        hf = draft_config.hf_config
        inner_model = getattr(hf, "model", None)
        report["parsed"] = {
            "hf_config_class": type(hf).__name__,
            "model_type": hf.model_type,
            "wrapped_model_type": getattr(inner_model, "model_type", None),
            "architectures": list(draft_config.architectures),
            "architecture": draft_config.architecture,
            "use_mla": bool(draft_config.use_mla),
            "head_size": draft_config.get_head_size(),
            **{
                key: getattr(hf, key, None)
                for key in (
                    "vocab_size",
                    "draft_vocab_size",
                    "hidden_size",
                    "target_hidden_size",
                    "num_hidden_layers",
                    "num_attention_heads",
                    *MLA_FIELDS,
                    "rope_parameters",
                    "eagle_aux_hidden_state_layer_ids",
                    "eagle_config",
                    "norm_before_residual",
                    "norm_output",
                    "fc_norm",
                )
            },
        }
        report["serve"] = {"method": spec.method, "num_speculative_tokens": k}
        # `vllm serve EXPORT`: vLLM finds no draft in it (no speculators_config),
        # so it would serve the draft itself as the model.
        from vllm.transformers_utils.config import maybe_override_with_speculators

        _, _, alone = maybe_override_with_speculators(args.export, None, False)
        report["serve_dir_speculative"] = alone
        # The same export labelled deepseek_v3: what vLLM 0.33 does with it.
        relabelled = scratch / "as-deepseek_v3"
        relabelled.mkdir()
        (relabelled / "config.json").write_text(
            json.dumps(dict(exported, model_type="deepseek_v3"))
        )
        try:
            _speculative_config(target, str(relabelled), k)
            report["deepseek_v3_refused"] = None
        except Exception as err:  # pydantic's ValidationError (a ValueError)
            report["deepseek_v3_refused"] = (
                str(err).split("Supported architectures")[0].strip()
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    ours = load_draft(args.checkpoint, torch.float32, args.verifier)
    verifier = load_causal_verifier(args.verifier, ours.target_layer_ids)
    _stub_mla_attention()
    report["stubbed"] = MLA_STUB
    torch.set_default_dtype(torch.float32)
    config = VllmConfig(
        model_config=target,
        speculative_config=spec,
        device_config=DeviceConfig(device="cpu"),
        # custom_ops none: vLLM's own switch to each op's forward_native (the
        # compiled vllm._C kernels are absent here), as in the speculators path.
        compilation_config=CompilationConfig(
            mode=CompilationMode.NONE, custom_ops=["none"]
        ),
    )
    with set_current_vllm_config(config):
        _init_single_process()
        cls, arch = ModelRegistry.resolve_model_cls(
            draft_config.architectures, model_config=draft_config
        )
        draft = cls(vllm_config=config)
    report["draft_class"] = arch
    report["draft_module"] = f"{cls.__module__}.{cls.__qualname__}"
    tensors = load_file(str(Path(args.export) / "model.safetensors"))
    report.update(_load_and_check(draft, config, tensors, ours))
    report["one_step"] = _one_step(draft, config, ours, verifier, args.tokens)
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
