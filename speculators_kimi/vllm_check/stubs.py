"""Stand-ins for what vLLM runs only on CUDA/ROCm, and a one-process group."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Any

__all__ = [
    "BLOCK_STUBS",
    "K3_STUBS",
    "MLA_STUB",
    "bind_k3_kv_caches",
    "init_single_process",
    "stub_attention",
    "stub_block_drafter",
    "stub_k3_dspark",
    "stub_mla_attention",
]


@functools.cache
def _sdpa_attention() -> Any:
    """The stand-in class for vLLM's paged ``Attention``: causal SDPA over the
    step (sliding window kept), built once; the block drafters' stand-in
    extends it (the same heads, scale and window)."""
    import torch

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

    return SdpaAttention


def stub_attention() -> None:
    """vLLM's paged Attention -> causal SDPA over the step (sliding window kept)."""
    import vllm.model_executor.models.llama as vllm_llama

    vllm_llama.Attention = _sdpa_attention()


#: What the MLA path replaces, for the JSON report.
MLA_STUB = (
    "vllm.model_executor.layers.mla.MLAAttention (the paged MLA attention op) -> "
    "plain PyTorch: k_nope, v = kv_b_proj(kv_c_normed) (the module's own), "
    "k = cat(k_nope, k_pe), causal scaled_dot_product_attention at the module's "
    "own scale; the rest of MultiHeadLatentAttentionWrapper is vLLM's"
)


def stub_mla_attention() -> None:
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


#: What the block-drafter path replaces, for the JSON report.
BLOCK_STUBS = [
    "vllm.model_executor.models.qwen3_dflash.Attention (paged attention; its "
    "KV cache and CUDA kernels) -> SDPA over the context K/V that "
    "precompute_and_store_context_kv stores through attn.impl.do_kv_cache_update "
    "plus the block's own K/V: every context position visible, the block causal "
    "or not as the layer's flag from get_draft_attn_causal() (what vLLM's runner "
    "passes its attention metadata), the layer's sliding window by position",
    "vllm._custom_ops.rms_norm (torch.ops._C, absent on CPU) in the context-KV "
    "precompute -> vLLM's own vllm.ir.ops.rms_norm (its native rms_norm), per "
    "layer for the grouped K-norm's [layers, head_dim] weight",
    "vllm._custom_ops.rotary_embedding (torch.ops._C) in the context-KV "
    "precompute -> vLLM's own RotaryEmbedding.forward_static (its native rotary "
    "embedding), written back in place",
]


def _rms_norm(out, x, weight, epsilon):  # type: ignore[no-untyped-def]
    """``vllm._custom_ops.rms_norm`` (out-parameter, a 2-D weight: one row per
    layer) through vLLM's own native ``vllm.ir.ops.rms_norm``."""
    from vllm import ir

    if weight is not None and weight.dim() == 2:  # one weight per layer
        for i in range(weight.shape[0]):
            out[i].copy_(ir.ops.rms_norm(x[i], weight[i], epsilon))
    else:
        out.copy_(ir.ops.rms_norm(x, weight, epsilon))


def _rotary_embedding(positions, query, key, head_size, cache, is_neox):  # type: ignore[no-untyped-def]
    """``vllm._custom_ops.rotary_embedding`` (in place) through vLLM's own
    ``RotaryEmbedding.forward_static``."""
    from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding

    q, k = RotaryEmbedding.forward_static(
        positions, query, key, head_size, cache.shape[-1], cache, is_neox
    )
    query.copy_(q)
    if key is not None:
        key.copy_(k)


def stub_block_drafter() -> None:
    """vLLM's DFlash-family CUDA-only pieces -> the stand-ins :data:`BLOCK_STUBS`
    names (the DSpark and DFlash2 classes build on the same module)."""
    import types

    import torch
    import vllm.model_executor.models.qwen3_dflash as vllm_dflash

    class BlockAttention(_sdpa_attention()):  # type: ignore[misc]  # a run-time class
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.kv_cache = None
            # precompute_and_store_context_kv writes through attn.impl (not a
            # submodule: a module holding itself would loop named_modules).
            object.__setattr__(self, "impl", self)
            self.context: tuple[torch.Tensor, torch.Tensor] | None = None
            self.causal: bool | None = None  # set from get_draft_attn_causal()

        def do_kv_cache_update(self, layer, k, v, kv_cache, slot_mapping):  # type: ignore[no-untyped-def]
            self.context = (k.clone(), v.clone())

        def forward(self, q, k, v):  # type: ignore[no-untyped-def]
            assert self.context is not None and self.causal is not None
            ctx_k, ctx_v = self.context
            c, n = ctx_k.shape[0], q.shape[0]
            q = q.view(n, self.heads, self.size).transpose(0, 1)
            k = torch.cat([ctx_k, k.view(n, self.kv_heads, self.size)])
            v = torch.cat([ctx_v, v.view(n, self.kv_heads, self.size)])
            # Context at positions 0..c-1, the block right after it.
            q_pos = c + torch.arange(n)
            k_pos = torch.arange(c + n)
            mask = (k_pos[None, :] < c) | (
                (k_pos[None, :] <= q_pos[:, None]) if self.causal else True
            )
            if self.window:
                mask = mask & (q_pos[:, None] - k_pos[None, :] < self.window)
            out = torch.nn.functional.scaled_dot_product_attention(
                q,
                k.transpose(0, 1),
                v.transpose(0, 1),
                attn_mask=mask,
                scale=self.scale,
                enable_gqa=True,
            )
            return out.transpose(0, 1).reshape(n, -1)

    vllm_dflash.Attention = BlockAttention  # type: ignore[misc]
    vllm_dflash.ops = types.SimpleNamespace(  # type: ignore[assignment]
        rms_norm=_rms_norm, rotary_embedding=_rotary_embedding
    )


#: What the MLA DSpark (``K3DSparkForCausalLM``) path replaces, for the report.
K3_STUBS = [
    "vllm.models.kimi_k3.nvidia.mla.MultiHeadLatentAttention._attention (the "
    "fused Triton/CUDA epilogues that rope q_pe/k_pe, insert the block's latent "
    "into the paged cache, and the MLA attention backend's forward_mqa) -> "
    "PyTorch: q_pe and k_pe roped by vLLM's own RotaryEmbedding.forward_static "
    "with the layer's cos_sin_cache (interleaved, YaRN mscale baked in), the "
    "block's [kv_c_normed | k_pe] written into the layer's latent page cache, "
    "then every used slot of that cache expanded by the layer's own kv_b_proj "
    "and attended by scaled_dot_product_attention at the layer's scale, "
    "non-causal (non_causal_multi_token_decode: the context precedes, the block "
    "is bidirectional)",
    "the MLA attention backend and prefill backend the layer selects at build "
    "(vllm.v1.attention.selector.get_attn_backend(use_mla=True), "
    "get_mla_prefill_backend; CUDA/ROCm only) -> inert placeholders (the "
    "attention above does not use them)",
    "vllm.models.common.ops.fused_q_kv_rmsnorm (a fused GPU kernel) -> vLLM's "
    "own vllm.ir.ops.rms_norm on q_c and kv_c",
    "vllm._custom_ops.rms_norm (torch.ops._C) in the context-KV precompute -> "
    "vllm.ir.ops.rms_norm, per layer for the grouped [layers, kv_lora_rank] "
    "weight",
    "vllm._custom_ops.rotary_embedding (torch.ops._C) in the context-KV "
    "precompute -> RotaryEmbedding.forward_static, written back in place",
    "vllm._custom_ops.concat_and_cache_mla_grouped (torch.ops._C) -> the same "
    "writes in PyTorch: each layer's [kv_c_normed | k_pe] into its page cache "
    "(found by the cache pointer vLLM passes) at the slot mapping",
    "torch.accelerator.empty_cache (vLLM's WorkspaceManager releases the "
    "accelerator's cached memory when its workspace grows; no accelerator "
    "here) -> a no-op; torch.cuda.is_current_stream_capturing (asserted false "
    "before the context-KV insert; a CPU build of torch cannot answer it) -> "
    "False",
]

#: Page caches bound by :func:`bind_k3_kv_caches`, by data pointer (what vLLM's
#: grouped cache-insert op is given).
_K3_CACHES: dict[int, object] = {}


def bind_k3_kv_caches(draft, num_slots: int, block_size: int = 16) -> None:  # type: ignore[no-untyped-def]
    """One latent page cache per draft layer, ``[blocks, 1, block_size,
    kv_lora_rank + qk_rope_head_dim]``, bound through the layer's own
    ``bind_kv_cache`` (as vLLM's runner binds them)."""
    import torch

    blocks = -(-num_slots // block_size)
    for layer in draft.model.layers:
        attn = layer.self_attn
        cache = torch.zeros(blocks, 1, block_size, attn.head_size)
        attn.bind_kv_cache(cache)
        _K3_CACHES[attn.kv_cache.data_ptr()] = attn.kv_cache


def stub_k3_dspark() -> None:
    """vLLM's MLA DSpark CUDA-only pieces -> the stand-ins :data:`K3_STUBS` names."""
    import types

    import torch
    import vllm.models.kimi_k3.nvidia.dspark_mla as vllm_k3
    import vllm.models.kimi_k3.nvidia.mla as vllm_mla
    from vllm import ir
    from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding

    def rope(rot, positions, x):  # type: ignore[no-untyped-def]
        out, _ = RotaryEmbedding.forward_static(
            positions,
            x.reshape(x.shape[0], -1).float(),
            None,
            rot.head_size,
            rot.rotary_dim,
            rot.cos_sin_cache,
            rot.is_neox_style,
        )
        return out.view(x.shape).to(x.dtype)

    def attention(self, positions, q, kv_c_normed, k_pe, attn_out):  # type: ignore[no-untyped-def]
        assert self.non_causal_multi_token_decode and self.rotary_emb is not None
        nope, rot_dim, lora = (
            self.qk_nope_head_dim,
            self.qk_rope_head_dim,
            self.kv_lora_rank,
        )
        q_nope, q_pe = q.split([nope, rot_dim], dim=-1)
        q_pe = rope(self.rotary_emb, positions, q_pe)
        k_pe = rope(self.rotary_emb, positions, k_pe)
        flat = self.kv_cache.view(-1, self.kv_cache.shape[-1])
        slots = self.block_slots
        flat[slots, :lora] = kv_c_normed
        flat[slots, lora:] = k_pe.reshape(-1, rot_dim)
        used = flat[: int(slots.max()) + 1]  # the context's slots, then the block's
        kv = self.kv_b_proj(used[:, :lora])[0].view(
            used.shape[0], self.num_local_heads, nope + self.v_head_dim
        )
        k_nope, v = kv.split([nope, self.v_head_dim], dim=-1)
        k = torch.cat(
            [k_nope, used[:, None, lora:].expand(-1, self.num_local_heads, -1)],
            dim=-1,
        )
        q = torch.cat([q_nope, q_pe], dim=-1)
        out = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), scale=self.scale
        )
        attn_out.copy_(out.transpose(0, 1).reshape(attn_out.shape))

    class _Placeholder:
        def __init__(self, *_: object, **__: object) -> None:
            pass

    class _Backend:
        @staticmethod
        def get_impl_cls():  # type: ignore[no-untyped-def]
            return _Placeholder

        @staticmethod
        def get_name() -> str:
            return "CPU_STUB"

    def fused_q_kv_rmsnorm(qr, kv, q_weight, kv_weight, eps):  # type: ignore[no-untyped-def]
        return ir.ops.rms_norm(qr, q_weight, eps), ir.ops.rms_norm(kv, kv_weight, eps)

    def concat_and_cache_mla_grouped(  # type: ignore[no-untyped-def]
        kv_c, k_pe, cache_ptrs, slot_mapping, *_: object
    ):
        for i, ptr in enumerate(cache_ptrs.tolist()):
            flat = _K3_CACHES[ptr].view(-1, _K3_CACHES[ptr].shape[-1])  # type: ignore[attr-defined]
            lora = kv_c.shape[-1]
            flat[slot_mapping[i], :lora] = kv_c[i]
            flat[slot_mapping[i], lora:] = k_pe[i]

    if not torch.accelerator.is_available():
        torch.accelerator.empty_cache = lambda: None  # type: ignore[assignment]
        torch.cuda.is_current_stream_capturing = lambda: False
    vllm_mla.MultiHeadLatentAttention._attention = attention  # type: ignore[method-assign]
    vllm_mla.get_attn_backend = lambda *a, **k: _Backend  # type: ignore[assignment]
    vllm_mla.get_mla_prefill_backend = lambda *a, **k: _Placeholder  # type: ignore[assignment]
    vllm_mla.fused_q_kv_rmsnorm = fused_q_kv_rmsnorm  # type: ignore[assignment]
    vllm_k3.ops = types.SimpleNamespace(  # type: ignore[assignment]
        rms_norm=_rms_norm,
        rotary_embedding=_rotary_embedding,
        concat_and_cache_mla_grouped=concat_and_cache_mla_grouped,
    )


def init_single_process() -> None:
    """vLLM's distributed state for one CPU process (gloo, no parallelism); once
    per process (a second check in the same process reuses it)."""
    from vllm.distributed import (
        init_distributed_environment,
        initialize_model_parallel,
    )
    from vllm.distributed.parallel_state import model_parallel_is_initialized

    if model_parallel_is_initialized():
        return

    # A file store, not a TCP port: two checks at once (pytest-xdist workers)
    # collided on a fixed port.
    store = Path(tempfile.mkdtemp(prefix="vllm-check-")) / "store"
    init_distributed_environment(
        world_size=1,
        rank=0,
        local_rank=0,
        distributed_init_method=f"file://{store}",
        backend="gloo",
    )
    initialize_model_parallel(1, 1)
