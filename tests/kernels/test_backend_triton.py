"""The ``triton`` draft attention backend through the whole Eagle3 draft model.

Loss and every parameter gradient of one training step over 3 TTT steps must match
the ``sdpa`` backend (Triton interpreter on CPU; ``tests/kernels/conftest.py`` sets
``TRITON_INTERPRET=1``). Skipped until both the kernels
(``speculators_kimi.kernels.draft_attention``) and the pluggable draft attention
unit (``speculators.models.attention_backends``) are importable.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
import torch


def _importable(module: str, attr: str) -> bool:
    try:
        return hasattr(importlib.import_module(module), attr)
    except ImportError:
        return False


pytestmark = [
    pytest.mark.skipif(
        not _importable("speculators_kimi.kernels", "draft_attention"),
        reason="speculators_kimi.kernels.draft_attention is not there yet",
    ),
    pytest.mark.skipif(
        importlib.util.find_spec("speculators.models.attention_backends") is None,
        reason="the vendored speculators lacks the pluggable draft attention unit",
    ),
]

SEQ_LEN = 64
VOCAB = 96
HIDDEN = 32
TTT_STEPS = 3
# Sliding window of the second draft layer: smaller than every document, so the
# windowed and full layers attend to different keys.
WINDOW = 5
# fp32 throughout; the kernels' online softmax sums in a different order than sdpa.
LOSS_TOL: dict[str, Any] = {"rtol": 1e-5, "atol": 1e-5}
GRAD_TOL: dict[str, Any] = {"rtol": 1e-4, "atol": 1e-5}


@pytest.fixture
def triton_backend(monkeypatch):
    """The ``triton`` backend, from its entry point or registered for this test."""
    from speculators.models import attention_backends
    from transformers.modeling_utils import AttentionInterface

    from speculators_kimi.kernels.backend import TritonBackend

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    # Whatever a test registers is undone afterwards.
    registry = attention_backends.DraftAttentionBackend.registry or {}
    monkeypatch.setattr(
        attention_backends.DraftAttentionBackend, "registry", dict(registry)
    )
    monkeypatch.setattr(attention_backends, "_INSTANCES", {})
    monkeypatch.setattr(
        AttentionInterface, "_global_mapping", dict(AttentionInterface._global_mapping)
    )
    try:
        backend = attention_backends.get_backend("triton")
    except ValueError:  # the entry point is not installed
        attention_backends.DraftAttentionBackend.register("triton")(TritonBackend)
        backend = attention_backends.get_backend("triton")
    assert isinstance(backend, TritonBackend)
    return backend


def _document_ids() -> torch.Tensor:
    # Three documents of uneven lengths, then padding.
    return torch.tensor([0] * 19 + [1] * 23 + [2] * 14 + [-1] * 8)


def _tiny_eagle3(attn_impl: str):
    from transformers import Qwen3Config

    from speculators_kimi.tiny_verifier import TinyVerifierSpec, dense_text
    from speculators_kimi.tiny_verifier.draft import build_eagle3_draft

    # The tiny dense family's shape (4 heads, GQA 2) at HIDDEN, head_dim 8, with a
    # full layer and a windowed one.
    spec = TinyVerifierSpec(hidden_size=HIDDEN, intermediate_size=64, num_layers=2)
    layer_config = Qwen3Config(
        **dense_text(spec=spec, vocab_size=VOCAB, max_position_embeddings=256),
        head_dim=8,
        layer_types=["full_attention", "sliding_attention"],
        use_sliding_window=True,
        sliding_window=WINDOW,
    )
    layer_config._attn_implementation = attn_impl
    return build_eagle3_draft(
        layer_config,
        draft_vocab_size=VOCAB,
        ttt_steps=TTT_STEPS,
        verifier_architecture="Qwen3ForCausalLM",
        std=0.5,
    )


def _train_step(build, attn_impl: str) -> dict[str, torch.Tensor]:
    """Loss and every parameter gradient of one step over ``TTT_STEPS`` steps."""
    from speculators.losses import resolve_loss_config

    model = build(attn_impl)
    gen = torch.Generator().manual_seed(1)
    document_ids = _document_ids().unsqueeze(0)
    _, loss, _ = model(
        hidden_states=torch.randn(1, SEQ_LEN, 3 * HIDDEN, generator=gen),
        input_ids=torch.randint(0, VOCAB, (1, SEQ_LEN), generator=gen),
        document_ids=document_ids,
        loss_mask=document_ids != -1,
        verifier_last_hidden_states=torch.randn(1, SEQ_LEN, HIDDEN, generator=gen),
        ttt_steps=TTT_STEPS,
        loss_config=resolve_loss_config("kl_div", "eager"),
    )
    loss.backward()
    grads = {
        name: param.grad
        for name, param in model.named_parameters()
        if param.requires_grad
    }
    assert all(grad is not None for grad in grads.values()), "missing gradients"
    return {"loss": loss.detach(), **grads}


def test_eagle3_train_step_matches_sdpa(triton_backend):
    want = _train_step(_tiny_eagle3, "sdpa")
    got = _train_step(_tiny_eagle3, "triton")
    assert got.keys() == want.keys()
    # fc, both layers' attention and MLP weights, norms: every trainable parameter.
    assert len(got) > 20
    torch.testing.assert_close(got.pop("loss"), want.pop("loss"), **LOSS_TOL)
    for name, grad in got.items():
        assert grad.abs().sum() > 0, name
        torch.testing.assert_close(grad, want[name], **GRAD_TOL, msg=name)


def test_mask_is_built_once_and_not_extended(triton_backend):
    mask = triton_backend.build_mask(_document_ids(), SEQ_LEN, "cpu", WINDOW)
    assert mask.sliding_window == WINDOW
    assert mask.document_ids.dtype == torch.int32
    assert triton_backend.extend_mask(mask, SEQ_LEN) is mask
    with pytest.raises(ValueError, match="document_ids must be"):
        triton_backend.build_mask(_document_ids(), SEQ_LEN + 1, "cpu")


def test_supports_device(triton_backend, monkeypatch):
    from speculators.train.device import cpu_attn_impls

    assert triton_backend.supports_device("cuda")
    assert triton_backend.supports_device(torch.device("cuda", 1))
    assert triton_backend.supports_device("cpu")
    assert "triton" in cpu_attn_impls()
    monkeypatch.delenv("TRITON_INTERPRET")
    assert not triton_backend.supports_device("cpu")
    assert "triton" not in cpu_attn_impls()
    assert not triton_backend.supports_device("meta")


def test_custom_mask_mods_are_refused(triton_backend):
    # e.g. P-EAGLE's masks: the kernels implement only the Eagle3 TTT mask.
    with pytest.raises(NotImplementedError, match="'triton'"):
        triton_backend.mask_from_mod(lambda b, h, q, kv: q >= kv, 4, 4, "cpu")


def _tiny_mla_eagle3(attn_impl: str):
    """An MLA draft (``--draft-arch deepseek_v3``): q/k heads 24 wide (nope 16 +
    rope 8), v heads 16, YaRN rope whose ``mscale`` changes the softmax scale."""
    from transformers import DeepseekV3Config

    from speculators_kimi.tiny_verifier import KimiTinySpec, mla_text
    from speculators_kimi.tiny_verifier.draft import build_eagle3_draft

    # The tiny Kimi family's MLA shape (4 heads, nope 16, rope 8, v 16) at HIDDEN,
    # without a q LoRA and with YaRN rope.
    spec = KimiTinySpec(
        hidden_size=HIDDEN,
        intermediate_size=64,
        moe_intermediate_size=16,
        num_layers=1,
        max_position_embeddings=256,
    )
    layer_config = DeepseekV3Config(
        **mla_text(spec, vocab_size=VOCAB, q_lora_rank=None, kv_lora_rank=16),
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 64,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
    )
    layer_config._attn_implementation = attn_impl
    return build_eagle3_draft(
        layer_config,
        draft_vocab_size=VOCAB,
        ttt_steps=TTT_STEPS,
        verifier_architecture="DeepseekV3ForCausalLM",
        std=0.5,
    )


def test_mla_draft_train_step_matches_sdpa(triton_backend):
    """Loss and every gradient of an MLA draft over 3 TTT steps, ``triton`` vs
    ``sdpa``: the kernels take q/k heads wider than v heads and the layer's
    YaRN-scaled softmax scale."""
    want = _train_step(_tiny_mla_eagle3, "sdpa")
    got = _train_step(_tiny_mla_eagle3, "triton")
    attention = _tiny_mla_eagle3("sdpa").layers[0].self_attn
    assert attention.qk_head_dim == 24 and attention.v_head_dim == 16
    assert attention.scaling != pytest.approx(24**-0.5)  # mscale applied
    assert got.keys() == want.keys()
    assert any("kv_b_proj" in name for name in got)
    torch.testing.assert_close(got.pop("loss"), want.pop("loss"), **LOSS_TOL)
    for name, grad in got.items():
        assert grad.abs().sum() > 0, name
        torch.testing.assert_close(grad, want[name], **GRAD_TOL, msg=name)


def test_heads_wider_than_the_kernels_are_refused_with_the_fix():
    """The one shape the kernels cannot hold: a head wider than 256."""
    from speculators_kimi.kernels.backend import TritonBackend, triton_attention_forward

    n = 8
    mask = TritonBackend().build_mask(torch.zeros(n, dtype=torch.long), n, "cpu")
    q = torch.randn(1, 2, n, 320)
    v = torch.randn(1, 2, n, 128)
    with pytest.raises(ValueError, match="--draft-attn-impl sdpa") as err:
        triton_attention_forward(torch.nn.Module(), q, q, v, mask)
    assert "q/k heads are 320 wide" in str(err.value)


def test_speculators_train_trains_an_mla_draft_with_triton(trained_mla_demo):
    """`speculators train --draft-arch deepseek_v3 --draft-attn-impl triton`, the
    real command (the MLA demo's training run, on the tiny Kimi-K2.5 verifier)."""
    from pathlib import Path

    run = Path(trained_mla_demo["out"]) / "run"
    log = (run / "train.log").read_text()
    assert "draft/draft_attn_impl='triton'" in log
    assert "draft/draft_arch='deepseek_v3'" in log
    assert trained_mla_demo["train_steps"] == 4
    first, last = trained_mla_demo["loss_first"], trained_mla_demo["loss_last"]
    assert torch.isfinite(torch.tensor([first, last])).all()
    assert last < first
