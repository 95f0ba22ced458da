# SPDX-License-Identifier: Apache-2.0
"""DFlash and DSpark drafts with DeepSeek-V3 MLA layers (``deepseek_v3``)."""

import copy
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import DynamicCache
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
    DeepseekV3Attention,
    DeepseekV3MLP,
    DeepseekV3RotaryEmbedding,
)

from speculators.models.dflash.core import DFlashDraftModel
from speculators.models.dflash.mla import DeepseekV3DFlashDecoderLayer
from speculators.models.dspark import DSparkDraftModel, DSparkSpeculatorConfig
from speculators.models.eagle3.model_definitions import MLA_FIELDS
from speculators.train import cli
from speculators.train.cli import create_transformer_layer_config
from speculators.train.config import TrainConfig
from speculators.train.data_checks import DataCheckError
from speculators.utils.text_config import load_text_config
from tests.unit.mock import verifier_checkpoints as vc
from tests.unit.mock import verifiers

BLOCK = 4
SEQ = 16


@pytest.fixture(scope="module")
def kimi(tmp_path_factory) -> vc.Zoo:
    """Kimi-K2.5 layout: ``KimiK25Config`` around a DeepSeek-V3 text config."""
    return vc.ZOO["kimi_k25_hub"](tmp_path_factory.mktemp("kimi"))


def _draft(
    path: Path,
    algorithm: str = "dspark",
    *,
    num_layers: int = 2,
    draft_attn_impl: str = "sdpa",
) -> Any:
    """A DFlash or DSpark MLA draft of the verifier at ``path``, built as
    training builds it, its weights moved away from their initial values."""
    model_class = DSparkDraftModel if algorithm == "dspark" else DFlashDraftModel
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = create_transformer_layer_config(
            verifier_name_or_path=str(path),
            num_layers=num_layers,
            draft_arch="deepseek_v3",
            hidden_act=None,
            sliding_window=32,
            full_attention_indices=[],
        )
        model = model_class.from_training_args(
            verifier_config=config,
            verifier_name_or_path=str(path),
            draft_vocab_size=verifiers.VOCAB,
            mask_token_id=verifiers.VOCAB - 1,
            block_size=BLOCK,
            draft_attn_impl=draft_attn_impl,
        )
    with torch.no_grad():
        for name, param in model.named_parameters():
            # The verifier's embedding and full-vocabulary head stay exact.
            if param.requires_grad and not name.startswith(("embed", "lm_head")):
                param.add_(torch.randn_like(param) * 0.05)
    return model


def _batch(hidden_size: int, seq: int = SEQ, seed: int = 1) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(seed)
    return {
        "hidden_states": torch.randn(1, seq, 3 * hidden_size, generator=generator),
        "input_ids": torch.randint(0, verifiers.VOCAB, (1, seq), generator=generator),
        "loss_mask": torch.ones(1, seq, dtype=torch.long),
        "verifier_last_hidden_states": torch.randn(
            1, seq, hidden_size, generator=generator
        ),
        # Two packed documents: no block of the second may see the first.
        "document_ids": torch.tensor([[0] * (seq // 2) + [1] * (seq - seq // 2)]),
    }


def _block_logits(model: Any, batch: dict[str, Any], max_anchors: int) -> Any:
    """The block logits of the training forward (anchors drawn with one seed)."""
    torch.manual_seed(5)
    with torch.no_grad():
        return model._backbone_forward(**batch, max_anchors=max_anchors)[1]


@pytest.mark.parametrize("algorithm", ["dflash", "dspark"])
def test_layers_are_mla_with_the_verifiers_geometry(kimi, algorithm):
    model = _draft(kimi.path, algorithm, num_layers=3)
    text = load_text_config(str(kimi.path))
    draft = model.config.transformer_layer_config
    assert draft.model_type == "deepseek_v3"
    for name in MLA_FIELDS:
        assert getattr(draft, name) == getattr(text, name), name
    assert draft.rope_interleave == text.rope_interleave
    assert draft.num_attention_heads == text.num_attention_heads
    assert draft.layer_types == ["full_attention"] * 3
    assert model.sliding_window_indices == []
    assert isinstance(model.rotary_emb, DeepseekV3RotaryEmbedding)
    for layer in model.layers:
        assert isinstance(layer, DeepseekV3DFlashDecoderLayer)
        assert isinstance(layer.mlp, DeepseekV3MLP)
        attention = layer.self_attn
        # The latent page: kv_lora_rank + qk_rope_head_dim per position.
        assert attention.kv_a_proj_with_mqa.in_features == text.hidden_size
        assert attention.kv_a_proj_with_mqa.out_features == (
            text.kv_lora_rank + text.qk_rope_head_dim
        )
        assert attention.kv_b_proj.in_features == text.kv_lora_rank


def _dflash_mask(ctx: int, q_len: int) -> torch.Tensor:
    """``[q_len, ctx + q_len]``: the whole context and the whole block."""
    return torch.ones(q_len, ctx + q_len, dtype=torch.bool)


@pytest.mark.parametrize("attn_impl", ["eager", "sdpa"])
def test_attention_is_transformers_mla_over_context_and_block(kimi, attn_impl):
    """The block's attention output is what a stock transformers
    ``DeepseekV3Attention`` (weights loaded strictly) gives for the block's rows
    when it runs over ``cat([context, block])`` with the context's rows visible
    to the block, bidirectionally inside the block."""
    model = _draft(kimi.path, draft_attn_impl=attn_impl).eval()
    attention: Any = model.layers[0].self_attn
    config = copy.copy(model.config.transformer_layer_config)
    config._attn_implementation = "eager"
    reference = DeepseekV3Attention(config, layer_idx=0)
    reference.load_state_dict(attention.state_dict(), strict=True)

    ctx, q_len = 6, BLOCK
    generator = torch.Generator().manual_seed(2)
    target = torch.randn(1, ctx, model.hidden_size, generator=generator)
    block = torch.randn(1, q_len, model.hidden_size, generator=generator)
    positions = torch.arange(ctx + q_len)[None]
    rope = model.rotary_emb(block, positions)
    mask = _dflash_mask(ctx, q_len)
    with torch.no_grad():
        got, _ = attention(
            hidden_states=block,
            target_hidden=target,
            position_embeddings=rope,
            attention_mask=mask[None, None],
        )
        full = torch.zeros(ctx + q_len, ctx + q_len)
        full[:ctx, :ctx] = torch.tril(torch.zeros(ctx, ctx)).masked_fill(
            ~torch.tril(torch.ones(ctx, ctx, dtype=torch.bool)), float("-inf")
        )
        full[:ctx, ctx:] = float("-inf")
        want, _ = reference(
            torch.cat([target, block], dim=1),
            position_embeddings=rope,
            attention_mask=full[None, None],
        )
    torch.testing.assert_close(got, want[:, ctx:], rtol=1e-5, atol=1e-6)


def test_latent_cache_holds_the_verifiers_page_and_resumes(kimi):
    """A cache holds ``kv_lora_rank`` and ``qk_rope_head_dim`` per position (the
    verifier's page); two calls over a split context give the one call's
    output."""
    model = _draft(kimi.path).eval()
    attention: Any = model.layers[0].self_attn
    text = load_text_config(str(kimi.path))
    generator = torch.Generator().manual_seed(3)
    target = torch.randn(1, 7, model.hidden_size, generator=generator)
    block = torch.randn(1, BLOCK, model.hidden_size, generator=generator)
    positions = torch.arange(7 + BLOCK)[None]
    mask = _dflash_mask(7, BLOCK)[None, None]
    with torch.no_grad():
        whole, _ = attention(
            hidden_states=block,
            target_hidden=target,
            position_embeddings=model.rotary_emb(block, positions),
            attention_mask=mask,
        )
        cache = DynamicCache()
        # First the context alone (no block), then the rest and the block.
        attention(
            hidden_states=block[:, :0],
            target_hidden=target[:, :3],
            position_embeddings=model.rotary_emb(block, positions[:, :3]),
            attention_mask=None,
            past_key_values=cache,
        )
        kv_nope, k_rot = cache.layers[0].keys, cache.layers[0].values
        assert kv_nope.shape == (1, 1, 3, text.kv_lora_rank)
        assert k_rot.shape == (1, 1, 3, text.qk_rope_head_dim)
        resumed, _ = attention(
            hidden_states=block,
            target_hidden=target[:, 3:],
            position_embeddings=model.rotary_emb(block, positions[:, 3:]),
            attention_mask=mask,
            past_key_values=cache,
        )
    torch.testing.assert_close(resumed, whole, rtol=1e-5, atol=1e-6)


def test_yarn_rope_and_softmax_scale_come_from_the_verifier(tmp_path):
    yarn = {
        "rope_type": "yarn",
        "rope_theta": 50000.0,
        "factor": 4.0,
        "original_max_position_embeddings": 128,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    }
    path = verifiers.write_remote_checkpoint(
        tmp_path / "kimi_yarn",
        model_type="kimi_k25",
        sub_name="text_config",
        text={"model_type": "kimi_k2", **verifiers.mla_text(rope_parameters=yarn)},
        extra={"architectures": ["KimiK25ForConditionalGeneration"]},
    )[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        draft = create_transformer_layer_config(
            verifier_name_or_path=str(path),
            num_layers=1,
            draft_arch="deepseek_v3",
            hidden_act=None,
            sliding_window=32,
            full_attention_indices=[],
        )
    text = load_text_config(str(path))
    assert draft.rope_parameters["rope_type"] == "yarn"
    attention: Any = DeepseekV3DFlashDecoderLayer(draft, 0).self_attn
    reference = DeepseekV3Attention(text, layer_idx=0)
    assert attention.scaling == pytest.approx(reference.scaling)
    assert attention.scaling != pytest.approx(attention.qk_head_dim**-0.5)
    positions = torch.arange(200)[None]
    x = torch.zeros(1, 1, text.hidden_size)
    for got, want in zip(
        DeepseekV3RotaryEmbedding(draft)(x, positions),
        DeepseekV3RotaryEmbedding(text)(x, positions),
        strict=True,
    ):
        torch.testing.assert_close(got, want)


def test_flex_attention_equals_sdpa(kimi):
    """The GPU default backend takes MLA's q/k head dim != v head dim. Forward
    only: flex attention has no CPU backward."""
    logits = {}
    for impl in ("sdpa", "simple_flex_attention"):
        model = _draft(kimi.path, draft_attn_impl=impl).eval()
        batch = _batch(model.hidden_size, seq=256)
        logits[impl] = _block_logits(model, batch, max_anchors=8)
    torch.testing.assert_close(
        logits["simple_flex_attention"], logits["sdpa"], rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize("algorithm", ["dflash", "dspark"])
def test_trains_with_finite_gradients_everywhere(kimi, algorithm):
    model = _draft(kimi.path, algorithm)
    trainer_kwargs, _ = type(model).get_trainer_kwargs(
        loss_fn="kl_div", loss_implementation="eager", max_anchors=3
    )
    _, loss, _ = model(**_batch(model.hidden_size), **trainer_kwargs)
    assert torch.isfinite(loss)
    loss.backward()
    trained = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert "layers.1.self_attn.kv_b_proj.weight" in trained
    for name, param in trained.items():
        assert param.grad is not None, name
        assert torch.isfinite(param.grad).all(), name
        assert param.grad.abs().sum() > 0, name


def test_context_reaches_the_block_through_the_latent_path(kimi):
    """The block's logits depend on each layer's ``kv_a_layernorm`` (the
    context's latent) and on the aux states."""
    model = _draft(kimi.path).eval()
    batch = _batch(model.hidden_size)
    before = _block_logits(model, batch, max_anchors=2)
    with torch.no_grad():
        model.layers[1].self_attn.kv_a_layernorm.weight.mul_(2.0)
    assert not torch.allclose(_block_logits(model, batch, max_anchors=2), before)


def test_save_and_reload(kimi, tmp_path):
    model = _draft(kimi.path).eval()
    batch = _batch(model.hidden_size)
    model.save_pretrained(tmp_path / "ckpt")
    config = DSparkSpeculatorConfig.from_pretrained(tmp_path / "ckpt")
    config.transformer_layer_config._attn_implementation = "sdpa"
    reloaded = DSparkDraftModel.from_pretrained(tmp_path / "ckpt", config=config)
    reloaded.load_verifier_weights()
    reloaded.eval()
    assert isinstance(reloaded.layers[0], DeepseekV3DFlashDecoderLayer)
    torch.testing.assert_close(
        _block_logits(reloaded, batch, 2), _block_logits(model, batch, 2)
    )


@pytest.mark.parametrize("speculator_type", ["dflash", "dspark", "eagle3"])
def test_schema_accepts_mla_for_eagle3_dflash_dspark(speculator_type):
    cfg = TrainConfig.resolve(
        [
            "--verifier-name-or-path",
            "v",
            "--data-path",
            "d",
            "--speculator-type",
            speculator_type,
            "--draft-arch",
            "deepseek_v3",
        ]
    )
    assert cfg.draft.draft_arch == "deepseek_v3"


@pytest.mark.parametrize("speculator_type", ["dflash2", "xpress", "peagle"])
def test_schema_refuses_mla_for_other_types(speculator_type, capsys):
    argv = ["--verifier-name-or-path", "v", "--data-path", "d"]
    argv += ["--speculator-type", speculator_type, "--draft-arch", "deepseek_v3"]
    with pytest.raises(SystemExit):
        TrainConfig.resolve(argv)
    assert "it needs --speculator-type eagle3, dflash, dspark" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("extra", "refused"),
    [
        (["--draft-vocab-size", "128"], "--draft-vocab-size 128"),
        (["--d2t-path", "d2t.npy", "--t2d-path", "t2d.npy"], "--d2t-path"),
        ([], None),
        (["--draft-vocab-size", str(verifiers.VOCAB)], None),
    ],
)
def test_mla_dspark_refuses_a_reduced_vocabulary(kimi, extra, refused):
    argv = ["--verifier-name-or-path", str(kimi.path), "--data-path", "d"]
    argv += ["--speculator-type", "dspark", "--draft-arch", "deepseek_v3", *extra]
    cfg = TrainConfig.resolve(argv)
    if refused is None:
        cli._check_mla_dspark_vocabulary(cfg)
        return
    with pytest.raises(DataCheckError, match=f"full vocabulary.*{refused}"):
        cli._check_mla_dspark_vocabulary(cfg)
    # Other types and layers keep their reduced vocabularies.
    argv[argv.index("dspark")] = "dflash"
    cli._check_mla_dspark_vocabulary(TrainConfig.resolve(argv))
