"""EAGLE-3 drafts load verifier weights through the resolver (upstream call site)."""

import json
import warnings

import pytest
import torch

from speculators.models.eagle3.core import Eagle3DraftModel
from speculators.train.checkpointer import SingleGPUCheckpointer
from speculators.train.cli import create_transformer_layer_config
from speculators.utils.verifier_weights import (
    VERIFIER_WEIGHTS_FILENAME,
    VerifierWeightsError,
    verifier_weight_overrides,
)
from tests.unit import verifier_checkpoints as vc
from tests.unit import verifiers

DRAFT_VOCAB = 32


def _draft(path, draft_vocab: int | None = None) -> Eagle3DraftModel:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = create_transformer_layer_config(
            verifier_name_or_path=str(path),
            num_layers=1,
            draft_arch="llama",
            hidden_act=None,
            sliding_window=32,
            full_attention_indices=[0],
        )
        t2d = d2t = None
        if draft_vocab is not None:
            ids = torch.arange(0, verifiers.VOCAB, verifiers.VOCAB // draft_vocab)
            t2d = torch.zeros(verifiers.VOCAB, dtype=torch.bool)
            t2d[ids] = True
            d2t = ids - torch.arange(draft_vocab)
        return Eagle3DraftModel.from_training_args(
            verifier_config=config,
            t2d=t2d,
            d2t=d2t,
            verifier_name_or_path=str(path),
            draft_vocab_size=draft_vocab or verifiers.VOCAB,
            norm_before_residual=False,
            ttt_steps=1,
            draft_attn_impl="eager",
        )


@pytest.mark.parametrize("name", ["gemma3", "qwen2_5_omni", "kimi_k25_sharded"])
def test_eagle3_loads_resolved_weights(tmp_path, name):
    entry = vc.ZOO[name](tmp_path)
    model = _draft(entry.path, DRAFT_VOCAB)
    mask = model.t2d
    assert torch.equal(model.embed_tokens.weight, entry.embed)
    assert torch.equal(model.verifier_lm_head.weight, entry.head[mask])
    assert torch.equal(model.lm_head.weight, entry.head[mask])
    hidden = torch.randn(3, verifiers.HIDDEN)
    with torch.no_grad():
        torch.testing.assert_close(
            model.verifier_norm(hidden), entry.final_norm(hidden), rtol=0, atol=0
        )
    record = model.verifier_weight_resolution
    assert record["embed"]["key"] == entry.embed_key

    checkpointer = SingleGPUCheckpointer(tmp_path / "ckpt")
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad])
    checkpointer.save_checkpoint(model, optimizer, 0)
    written = json.loads(
        (tmp_path / "ckpt" / "0" / VERIFIER_WEIGHTS_FILENAME).read_text()
    )
    assert written["head"]["key"] == entry.head_key


def test_eagle3_overrides_reach_loader(tmp_path):
    entry = vc.ZOO["llama"](tmp_path)
    with (
        verifier_weight_overrides(head_key="model.missing.weight"),
        pytest.raises(VerifierWeightsError, match="--verifier-head-key"),
    ):
        _draft(entry.path)


def test_override_flags_and_config_file(tmp_path):
    from speculators.train.config import TrainConfig  # noqa: PLC0415

    base = ["--data-path", "d", "--save-path", str(tmp_path / "s")]
    cfg = TrainConfig.resolve(
        [
            "--verifier-name-or-path",
            "v",
            "--verifier-weight-prefix",
            "language_model.model",
            "--verifier-head-key",
            "language_model.lm_head.weight",
            *base,
        ]
    )
    flat = cfg.flatten()
    assert flat["verifier_weight_prefix"] == "language_model.model"
    assert flat["verifier_head_key"] == "language_model.lm_head.weight"
    assert flat["verifier_embed_key"] is None
    config_file = tmp_path / "run.yaml"
    config_file.write_text(cfg.dump_yaml())
    again = TrainConfig.resolve(["--config", str(config_file)])
    assert again.verifier.verifier_head_key == "language_model.lm_head.weight"
    assert again.verifier.verifier_weight_prefix == "language_model.model"
