"""Stand-ins for what vLLM runs only on CUDA/ROCm, and a one-process group."""

from __future__ import annotations

__all__ = ["MLA_STUB", "init_single_process", "stub_attention", "stub_mla_attention"]


def stub_attention() -> None:
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


def init_single_process() -> None:
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
