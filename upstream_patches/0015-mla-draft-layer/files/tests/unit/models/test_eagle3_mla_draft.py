"""EAGLE-3 drafts with DeepSeek-V3 multi-head latent attention (``deepseek_v3``)."""

import copy
import warnings
from typing import Any

import pytest
import torch
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
    DeepseekV3Attention,
    DeepseekV3MLP,
    DeepseekV3RotaryEmbedding,
)

from speculators.losses import resolve_loss_config
from speculators.models.eagle3 import Eagle3SpeculatorConfig
from speculators.models.eagle3.core import Eagle3DraftModel
from speculators.models.eagle3.model_definitions import MLA_FIELDS
from speculators.train.cli import create_transformer_layer_config
from speculators.train.config import TrainConfig
from speculators.utils.text_config import load_text_config
from tests.unit.mock import verifier_checkpoints as vc
from tests.unit.mock import verifiers

SEQ = 12
# Two packed documents: no query of the second may see the first.
DOCUMENT_IDS = torch.tensor([[0] * 7 + [1] * 5])


@pytest.fixture(scope="module")
def kimi(tmp_path_factory) -> vc.Zoo:
    """Kimi-K2.5 layout: ``KimiK25Config`` around a DeepSeek-V3 text config."""
    return vc.ZOO["kimi_k25_hub"](tmp_path_factory.mktemp("kimi"))


def _mla_draft(kimi: vc.Zoo, **kwargs) -> Eagle3DraftModel:
    torch.manual_seed(0)
    return vc.eagle3_draft(kimi.path, draft_arch="deepseek_v3", **kwargs)


def _batch(hidden_size: int, seed: int = 1) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {
        "hidden_states": torch.randn(1, SEQ, 3 * hidden_size, generator=generator),
        "input_ids": torch.randint(0, verifiers.VOCAB, (1, SEQ), generator=generator),
        "document_ids": DOCUMENT_IDS,
        # Positions restart per document and start at 1, as ``shift_batch`` makes.
        "position_ids": torch.cat([torch.arange(1, 8), torch.arange(1, 6)])[None],
    }


def _step_logits(model: Eagle3DraftModel, batch, ttt_steps: int) -> list:
    """The draft's logits of every TTT step, captured at ``lm_head``."""
    logits: list[torch.Tensor] = []
    handle = model.lm_head.register_forward_hook(
        lambda _module, _args, out: logits.append(out)
    )
    try:
        model(**batch, ttt_steps=ttt_steps)
    finally:
        handle.remove()
    return logits


def _document_causal_mask(document_ids: torch.Tensor) -> torch.Tensor:
    """Additive ``[1, 1, N, N]`` mask: causal within each packed document."""
    doc = document_ids[0]
    n = doc.shape[0]
    allowed = torch.tril(torch.ones(n, n, dtype=torch.bool)) & (
        doc[:, None] == doc[None, :]
    )
    mask = torch.zeros(n, n).masked_fill(~allowed, float("-inf"))
    return mask[None, None]


def _reference_first_step(model: Eagle3DraftModel, batch) -> torch.Tensor:
    """First TTT step with transformers' own ``DeepseekV3Attention`` (eager).

    The reference attention is a stock module; only its two down-projections are
    the draft's, since they read ``cat([embeds, hidden])``. Every other weight is
    loaded into it by name, strictly.
    """
    layer: Any = model.layers[0]
    config = copy.copy(model.config.transformer_layer_config)
    config._attn_implementation = "eager"
    attention = DeepseekV3Attention(config, layer_idx=0)
    attention.q_a_proj = copy.deepcopy(layer.self_attn.q_a_proj)
    attention.kv_a_proj_with_mqa = copy.deepcopy(layer.self_attn.kv_a_proj_with_mqa)
    attention.load_state_dict(layer.self_attn.state_dict(), strict=True)
    rotary = DeepseekV3RotaryEmbedding(config)

    positions = batch["position_ids"]
    embeds = layer.input_layernorm(model.embed_tokens(batch["input_ids"]))
    hidden = model.fc(batch["hidden_states"])
    attn_in = torch.cat([embeds, layer.hidden_norm(hidden)], dim=-1)
    attn_out, _ = attention(
        attn_in,
        position_embeddings=rotary(attn_in, positions),
        attention_mask=_document_causal_mask(batch["document_ids"]),
    )
    hidden = hidden + attn_out
    hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
    return model.lm_head(model.norm(hidden))


def test_geometry_comes_from_the_verifier(kimi):
    model = _mla_draft(kimi)
    text = load_text_config(str(kimi.path))
    draft = model.config.transformer_layer_config
    assert draft.model_type == "deepseek_v3"
    for name in MLA_FIELDS:
        assert getattr(draft, name) == getattr(text, name), name
    assert draft.num_attention_heads == text.num_attention_heads
    assert draft.layer_types == ["full_attention"]
    attention: Any = model.layers[0].self_attn
    assert attention.q_a_proj.in_features == 2 * text.hidden_size
    assert attention.kv_a_proj_with_mqa.in_features == 2 * text.hidden_size
    assert attention.kv_b_proj.in_features == text.kv_lora_rank
    assert isinstance(model.layers[0].mlp, DeepseekV3MLP)


def test_every_layer_is_dense(kimi):
    model = _mla_draft(kimi, num_layers=3)
    assert [type(layer.mlp) for layer in model.layers] == [DeepseekV3MLP] * 3
    # The shared config is left as it was built.
    assert model.config.transformer_layer_config.first_k_dense_replace == 3


@pytest.mark.parametrize("draft_attn_impl", ["eager", "sdpa"])
def test_first_ttt_step_matches_transformers_attention(kimi, draft_attn_impl):
    model = _mla_draft(kimi, draft_attn_impl=draft_attn_impl).eval()
    batch = _batch(model.hidden_size)
    with torch.no_grad():
        logits = _step_logits(model, batch, ttt_steps=1)[0]
        expected = _reference_first_step(model, batch)
    torch.testing.assert_close(logits, expected, rtol=1e-4, atol=1e-5)


def test_flex_attention_equals_sdpa_through_three_ttt_steps(kimi):
    """The GPU default backend takes MLA's q/k head dim != v head dim. Forward
    only: flex attention has no CPU backward."""
    n = 256  # flex attention's block masks are 128 wide
    generator = torch.Generator().manual_seed(1)
    hidden_size = _mla_draft(kimi).hidden_size
    batch = {
        "hidden_states": torch.randn(1, n, 3 * hidden_size, generator=generator),
        "input_ids": torch.randint(0, verifiers.VOCAB, (1, n), generator=generator),
        "document_ids": torch.tensor([[0] * 130 + [1] * 126]),
    }
    logits = {}
    for impl in ("sdpa", "simple_flex_attention"):
        model = _mla_draft(kimi, draft_attn_impl=impl).eval()
        with torch.no_grad():
            logits[impl] = _step_logits(model, batch, ttt_steps=3)
    for step, (want, got) in enumerate(
        zip(logits["sdpa"], logits["simple_flex_attention"], strict=True)
    ):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=f"step {step}")


def test_gradients_finite_through_three_ttt_steps(kimi):
    model = _mla_draft(kimi, ttt_steps=3, draft_attn_impl="sdpa")
    batch = _batch(model.hidden_size)
    _, loss, metrics = model(
        **batch,
        loss_mask=torch.ones(1, SEQ, dtype=torch.bool),
        verifier_last_hidden_states=torch.randn(1, SEQ, model.hidden_size),
        ttt_steps=3,
        ttt_step_loss_decay=1.0,
        loss_config=resolve_loss_config("kl_div", "eager"),
    )
    loss.backward()
    assert {f"loss_{step}_sum" for step in range(3)} <= set(metrics)
    trained = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert "layers.0.self_attn.kv_b_proj.weight" in trained
    for name, param in trained.items():
        assert param.grad is not None, name
        assert torch.isfinite(param.grad).all(), name
        assert param.grad.abs().sum() > 0, name


def test_later_steps_attend_to_earlier_steps(kimi):
    """Step 1 reads the latent KV cache of step 0: its logits depend on it."""
    model = _mla_draft(kimi, draft_attn_impl="sdpa").eval()
    batch = _batch(model.hidden_size)
    with torch.no_grad():
        first = _step_logits(model, batch, ttt_steps=2)
        model.layers[0].self_attn.kv_a_layernorm.weight.mul_(2.0)
        second = _step_logits(model, batch, ttt_steps=2)
    assert not torch.allclose(first[1], second[1])


def test_save_and_reload(kimi, tmp_path):
    model = _mla_draft(kimi, draft_attn_impl="sdpa").eval()
    model.save_pretrained(tmp_path / "ckpt")
    config = Eagle3SpeculatorConfig.from_pretrained(tmp_path / "ckpt")
    config.transformer_layer_config._attn_implementation = "sdpa"
    reloaded = Eagle3DraftModel.from_pretrained(tmp_path / "ckpt", config=config)
    reloaded.eval()
    assert reloaded.config.transformer_layer_config.model_type == "deepseek_v3"
    assert reloaded.input_norm is None
    state = reloaded.state_dict()
    for name, tensor in model.state_dict().items():
        assert torch.equal(state[name], tensor), name
    batch = _batch(model.hidden_size)
    with torch.no_grad():
        expected = _step_logits(model, batch, ttt_steps=2)
        actual = _step_logits(reloaded, batch, ttt_steps=2)
    for step, (want, got) in enumerate(zip(expected, actual, strict=True)):
        torch.testing.assert_close(got, want, msg=f"TTT step {step}")


def test_verifier_without_mla_is_refused(tmp_path):
    path = verifiers.llama(tmp_path / "llama")
    with pytest.raises(ValueError, match="--draft-config") as error:
        create_transformer_layer_config(
            verifier_name_or_path=str(path),
            num_layers=1,
            draft_arch="deepseek_v3",
            hidden_act=None,
            sliding_window=32,
            full_attention_indices=[],
        )
    assert "kv_lora_rank" in str(error.value)


def test_no_vllm_warning_for_mla_drafts(kimi):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        create_transformer_layer_config(
            verifier_name_or_path=str(kimi.path),
            num_layers=1,
            draft_arch="deepseek_v3",
            hidden_act=None,
            sliding_window=32,
            full_attention_indices=[],
        )


def _train_config(*flags: str) -> TrainConfig:
    base = ["--verifier-name-or-path", "v", "--data-path", "d", "--save-path", "s"]
    return TrainConfig.resolve([*base, *flags])


def test_mla_drafts_default_to_no_input_norm():
    assert _train_config("--draft-arch", "deepseek_v3").draft.norm_before_fc is False
    assert _train_config("--draft-arch", "llama").draft.norm_before_fc is True


def test_mla_drafts_are_eagle3_only(capsys):
    with pytest.raises(SystemExit):
        _train_config("--draft-arch", "deepseek_v3", "--speculator-type", "dflash")
    assert "it needs --speculator-type eagle3" in capsys.readouterr().err
