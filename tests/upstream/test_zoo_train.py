"""Zoo verifiers through our hidden-state generation and the standard trainer.

Each member is a tiny random-weight checkpoint from
:mod:`speculators_kimi.tiny_verifier`, saved the way its family ships: flat
Llama, Qwen3 with a tied head (no ``lm_head.weight`` on disk), Kimi-K2.5
(``language_model.`` keys, ignored vision tower), Gemma-3 (``save_pretrained``'s
``language_model.model.`` layout, tied head) and the members of
:mod:`zoo_builders` (DeepSeek-V3 with an MTP layer, fused or in the Hub's
per-expert layout; GPT-NeoX; Falcon with a tied head; Qwen2.5-VL; Llama-4;
Qwen2.5-Omni with a talker decoder; Kimi-K2.5 with remote code in the checkpoint,
sharded Kimi-K2.5; the hybrids Qwen3.5, Qwen3.5-MoE, Kimi-Linear and Nemotron-H).
For each: the captured states follow vLLM's convention against the verifier's own
forward (float32), hidden states are generated, the draft is trained (flat Llama
and Kimi-K2.5: ``speculators train`` in its own process, 2 steps, the checkpoint
reloaded; the others in this process through upstream's own functions in
``main``'s order, one forward, backward and AdamW step), the draft's frozen
embedding and head equal the verifier's own, its ``verifier_norm`` computes the
verifier's final norm (GPT-NeoX and Falcon included: units
``0003-nested-text-config`` for their geometry, ``0008-verifier-norm-semantics``
for their LayerNorm), and ``evaluate`` with the draft is lossless (hybrids: their
recurrent state rolled back, ``speculators_kimi/verifier/cache.py``).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset
from helpers import BIN, run
from zoo_builders import BUILDERS, HYBRIDS, Member

from speculators_kimi import tiny_verifier as tiny
from speculators_kimi.datagen import (
    generate_hidden_states,
)
from speculators_kimi.verifier import capture_hidden_states, load_text_verifier

STEPS = 2


def _causal_lm(path: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def _kimi_lm(path: Path):
    from speculators.utils.text_config import load_text_config
    from transformers import DeepseekV3ForCausalLM

    return DeepseekV3ForCausalLM.from_pretrained(
        path,
        config=load_text_config(str(path)),
        key_mapping={r"^language_model\.": ""},
        dtype=torch.float32,
    ).eval()


def _gemma3_lm(path: Path):
    from transformers import Gemma3ForConditionalGeneration

    return Gemma3ForConditionalGeneration.from_pretrained(
        path, dtype=torch.float32
    ).eval()


def _loaded(build, load=_causal_lm, norm=lambda m: m.model.norm):
    """A member whose truth is the verifier transformers loads from what we wrote."""

    def member(out: Path) -> Member:
        path = build(out).path
        model = load(path)
        embed = model.get_input_embeddings().weight.detach()
        head = model.get_output_embeddings().weight.detach()
        return Member(path, embed, head, norm(model), model=model)

    return member


ZOO = {
    "llama": _loaded(lambda out: tiny.llama(tiny.TinyVerifierSpec(), out)),
    "qwen3-tied": _loaded(tiny.qwen3_tied),
    "kimi-k25": _loaded(tiny.kimi_k25, _kimi_lm),
    "gemma3": _loaded(tiny.gemma3, _gemma3_lm, lambda m: m.model.language_model.norm),
    **BUILDERS,
}


def _dataset(path: Path, vocab: int, n: int = 12) -> Path:
    gen = torch.Generator().manual_seed(0)
    rows, masks = [], []
    for _ in range(n):
        length = int(torch.randint(12, 40, (1,), generator=gen))
        rows.append(torch.randint(8, vocab - 1, (length,), generator=gen).tolist())
        masks.append([0] * 4 + [1] * (length - 4))
    ds = Dataset.from_dict(
        {"input_ids": rows, "loss_mask": masks, "seq_len": [len(r) for r in rows]}
    )
    ds.set_format("torch")  # as prepare-data leaves it
    ds.save_to_disk(str(path))
    return path


def _check_convention(zoo: Member, layer_ids: list[int]) -> None:
    """vLLM's convention, against the verifier's own forward and output head."""
    decoder, cfg, _ = load_text_verifier(zoo.path, dtype=torch.float32)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(8, int(zoo.embed.shape[0]) - 1, (2, 13), generator=gen)
    ids_all = [0, *layer_ids, cfg.num_hidden_layers]
    hs, _ = capture_hidden_states(decoder, ids, ids_all)
    assert zoo.model is not None
    with torch.no_grad():
        ref = zoo.model(input_ids=ids, output_hidden_states=True)
        logits = torch.nn.functional.linear(zoo.norm(hs[:, :, -1]), zoo.head)
    torch.testing.assert_close(logits, ref.logits, rtol=1e-4, atol=1e-4)
    for k, i in enumerate(ids_all[:-1]):
        torch.testing.assert_close(hs[:, :, k], ref.hidden_states[i])
    torch.testing.assert_close(hs[:, :, -2], hs[:, :, -1])


# LayerNorm-family verifiers without num_key_value_heads / rms_norm_eps.
LAYERNORM_FAMILY = ("gpt-neox", "falcon")


def _generate(member: str, tmp_path: Path, n: int = 12):
    zoo = ZOO[member](tmp_path / "verifier")
    data = _dataset(tmp_path / "data", int(zoo.embed.shape[0]), n)
    res = generate_hidden_states(zoo.path, data, progress=False)
    assert res.written == n
    _check_convention(zoo, res.target_layer_ids)
    return zoo, data, res


def _train_step_in_process(argv: list[str]) -> torch.nn.Module:
    """What ``speculators train ARGV`` does up to its first optimizer step, in this
    process, through upstream's own functions in `main`'s order: resolve the
    config, substitute CPU implementations, read the vocabulary mappings, build
    the draft (verifier weights loaded), load the data, one forward and backward.
    Returns the draft with its gradients. The batch is preprocessed as `main`
    does for the speculator type (EAGLE-3 and P-EAGLE shift it, MTP renames the
    states, the DFlash family takes it as it is)."""
    import argparse

    from hs_connectors import HiddenStatesBackend
    from speculators.model import SpeculatorModel
    from speculators.models.eagle3.data import shift_batch
    from speculators.models.mtp.data import shift_batch_mtp
    from speculators.train import cli
    from speculators.train.config import TrainConfig
    from speculators.train.dataloader import create_train_val_loaders
    from speculators.train.device import device_fallbacks

    cfg = TrainConfig.resolve(argv)
    args = argparse.Namespace(**cfg.flatten())
    vars(args).update(device_fallbacks(cfg))
    d2t, t2d, draft_vocab_size = cli.parse_vocab_mappings(args)
    model_class = SpeculatorModel.registry[args.speculator_type]
    draft = cli.build_draft_model(args, model_class, t2d, d2t, draft_vocab_size)
    backend = HiddenStatesBackend.registry[args.hidden_states_backend]
    loader, _ = create_train_val_loaders(
        data_path=args.data_path,
        total_seq_len=args.total_seq_len,
        hidden_states_dtype=torch.float32,
        transfer=backend.from_train_args(args, args.data_path),
        vllm_endpoint=None,
        on_missing="raise",
        verifier_name_or_path=args.verifier_name_or_path,
        request_timeout=args.request_timeout,
        max_retries=args.max_retries,
        generation_validation_retries=args.generation_validation_retries,
        max_consecutive_generation_failures=args.max_consecutive_generation_failures,
        hidden_size=draft.config.transformer_layer_config.hidden_size,
        num_target_layers=len(draft.target_layer_ids),
        num_workers=0,
        prefetch_factor=None,
        preprocess={
            "eagle3": shift_batch,
            "peagle": shift_batch,
            "mtp": shift_batch_mtp,
        }.get(args.speculator_type),
        train_data_ratio=args.train_data_ratio,
        seed=args.seed,
    )
    train_kwargs, _ = model_class.get_trainer_kwargs(**vars(args))
    batch = next(iter(loader))
    batch = {k: v for k, v in batch.items() if k != "error_records"}
    _, loss, _ = draft(**batch, **train_kwargs)
    assert torch.isfinite(loss), loss
    loss.backward()
    return draft


#: The members whose whole CLI path (``speculators train`` in its own process,
#: 2 steps, a checkpoint) is proven; the others are checked in-process.
THROUGH_THE_CLI = ("llama", "kimi-k25")


def _trained_through_the_cli(
    cmd: list[str], cwd: Path, save: Path
) -> tuple[Path, dict]:
    """Run ``speculators train`` (``cmd``, saving under ``save``): its checkpoint,
    checked to have taken :data:`STEPS` steps, and that checkpoint's config."""
    proc = run(cmd, cwd=cwd, timeout=900)
    out = proc.stdout + proc.stderr
    ckpt = save / "checkpoints" / "0"
    state = json.loads((ckpt / "training_state.json").read_text())
    assert state["global_step"] == STEPS, out[-3000:]
    return ckpt, json.loads((ckpt / "config.json").read_text())


@pytest.mark.parametrize(
    "member",
    [
        *THROUGH_THE_CLI,
        "qwen3-tied",
        "gemma3",
        "deepseek-v3-mtp",
        "deepseek-v3-per-expert",
        "qwen2.5-vl",
        "llama4",
        "qwen2.5-omni",
        "kimi-k25-remote",
        "kimi-k25-sharded",
        *LAYERNORM_FAMILY,
        *HYBRIDS,
    ],
)
def test_zoo_member_trains(member, tmp_path):
    zoo, data, res = _generate(member, tmp_path)
    verifier = zoo.path

    save = tmp_path / "run"
    spec = tiny.TinyVerifierSpec()  # 8 layers: the trainer's default aux layers
    cmd = tiny.train_command(spec, verifier, data, save, max_steps=STEPS)
    cmd += zoo.train_args
    if member in THROUGH_THE_CLI:
        cmd[0] = str(BIN / "speculators")
        ckpt, config = _trained_through_the_cli(cmd, tmp_path, save)
        assert config["eagle_aux_hidden_state_layer_ids"] == res.target_layer_ids

        from speculators import SpeculatorModel

        draft: Any = SpeculatorModel.from_pretrained(str(ckpt))
    else:
        draft = _train_step_in_process(cmd[2:])
        assert list(draft.target_layer_ids) == res.target_layer_ids
        grads = [p.grad for p in draft.parameters() if p.requires_grad]
        assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)
        assert any(bool(g.abs().sum()) for g in grads)
        # One optimizer step (the trainer's AdamW), so evaluate decodes with a
        # draft that training changed; the frozen tensors checked below must not.
        trainable = [p for p in draft.parameters() if p.requires_grad]
        torch.optim.AdamW(trainable, lr=1e-3).step()
        ckpt = tmp_path / "draft"  # for evaluate, as the trainer would save it
        draft.save_pretrained(str(ckpt))
    got = draft.state_dict()
    truth = {"embed_tokens.weight": zoo.embed, "verifier_lm_head.weight": zoo.head}
    for key, want in truth.items():
        assert torch.equal(got[key], want.to(got[key].dtype)), f"{member}: {key}"
    # The norm as a function (RMS, Gemma's x * (1 + w), LayerNorm with bias),
    # against the verifier's own module with its weights in the draft's dtype.
    norm = draft.verifier_norm
    own = copy.deepcopy(zoo.norm).to(norm.weight.dtype).float()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, zoo.embed.shape[1], generator=gen)
    with torch.no_grad():
        torch.testing.assert_close(
            norm.float()(x), own(x), rtol=1e-5, atol=1e-5, msg=member
        )
    _check_evaluate(zoo, ckpt, data, hybrid=member in HYBRIDS)
    if zoo.marker is not None:
        assert not zoo.marker.exists(), "checkpoint code was imported"


def test_mla_draft_trains_through_the_cli(tmp_path):
    """``speculators train --draft-arch deepseek_v3`` on Kimi-K2.5: the MLA draft
    saved, reloaded and decoding losslessly against its verifier. (Distributed
    training is tests/upstream/test_train_cpu.py's one gloo and one FSDP run.)"""
    zoo, data, _ = _generate("kimi-k25", tmp_path)
    spec = tiny.TinyVerifierSpec()
    argv = tiny.train_command(spec, zoo.path, data, tmp_path / "run", max_steps=STEPS)
    cmd = [str(BIN / "speculators"), *argv[1:], "--draft-arch", "deepseek_v3"]
    ckpt, config = _trained_through_the_cli(cmd, tmp_path, tmp_path / "run")
    layer = config["transformer_layer_config"]
    assert layer["model_type"] == "deepseek_v3"
    text = json.loads((zoo.path / "config.json").read_text())["text_config"]
    for name in ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "v_head_dim"):
        assert layer[name] == text[name], name
    assert config["norm_before_fc"] is False

    from speculators import SpeculatorModel

    draft = SpeculatorModel.from_pretrained(str(ckpt))
    assert type(draft.layers[0]).__name__ == "DeepseekV3DecoderEagle3FirstLayer"
    assert "layers.0.self_attn.kv_b_proj.weight" in draft.state_dict()
    _check_evaluate(zoo, ckpt, data)


@pytest.mark.slow
def test_mla_dspark_trains_through_the_cli(tmp_path):
    """``speculators train --speculator-type dspark --draft-arch deepseek_v3`` on
    Kimi-K2.5: DSpark layers in the verifier's MLA layout (each layer's latent
    path over the context), the full vocabulary, 2 steps, saved, reloaded and
    decoding losslessly. A reduced vocabulary is refused before any work."""
    from speculators_kimi.tiny_verifier.train import TrainArgs, train_args

    zoo, data, _ = _generate("kimi-k25", tmp_path)
    save = tmp_path / "run"
    block = ("--block-size", "4", "--num-layers", "2", "--draft-attn-impl", "sdpa")
    args = TrainArgs(
        verifier=zoo.path,
        data=data,
        save_dir=save,
        total_seq_len=128,
        epochs=1,
        max_steps=STEPS,
        resume=False,
        draft_arch="deepseek_v3",
        speculator_type="dspark",
        extra=block,
    )
    cmd = [str(BIN / "speculators"), "train", *train_args(args)]
    ckpt, config = _trained_through_the_cli(cmd, tmp_path, save)
    assert config["speculators_model_type"] == "dspark"
    layer = config["transformer_layer_config"]
    assert layer["model_type"] == "deepseek_v3"
    text = json.loads((zoo.path / "config.json").read_text())["text_config"]
    for name in ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "v_head_dim"):
        assert layer[name] == text[name], name
    assert config["draft_vocab_size"] == text["vocab_size"]

    from speculators import SpeculatorModel

    draft: Any = SpeculatorModel.from_pretrained(str(ckpt))
    assert type(draft.layers[0]).__name__ == "DeepseekV3DFlashDecoderLayer"
    kv_a = draft.layers[0].self_attn.kv_a_proj_with_mqa
    assert kv_a.out_features == text["kv_lora_rank"] + text["qk_rope_head_dim"]
    _check_evaluate(zoo, ckpt, data)

    # A reduced vocabulary: refused in one line before the trainer does any work.
    again = [*cmd, "--draft-vocab-size", "64", "--save-path", str(tmp_path / "no")]
    proc = run(again, cwd=tmp_path, timeout=300, check=False)
    assert proc.returncode == 1
    assert "predicts over the verifier's full vocabulary" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "no" / "checkpoints").exists()


def _check_evaluate(zoo: Member, ckpt: Path, data: Path, hybrid: bool = False) -> None:
    """`speculators-kimi evaluate` on the member: its verifier computes the
    member's own logits (real transformers class), and speculative decoding with
    the trained draft is lossless."""
    from speculators_kimi.evaluate import dataset_prompts, load_session
    from speculators_kimi.verifier.cache import verifier_cache

    session = load_session(ckpt, zoo.path, dtype="float32", device="cpu")
    prompts = dataset_prompts(data, split="all")[:2]
    assert zoo.model is not None
    ids = prompts[0].token_ids
    logits, _ = session.verifier.forward(ids, verifier_cache(session.verifier.decoder))
    with torch.no_grad():
        want = zoo.model(input_ids=torch.tensor([ids])).logits[0].float()
    torch.testing.assert_close(logits, want, rtol=1e-4, atol=1e-4)
    report = session.evaluate(
        prompts, num_speculative_tokens=3, max_new_tokens=8, progress=False
    )
    assert report.lossless, report
    assert 0 < report.num_generated_tokens <= 16
    assert report.mean_acceptance_length >= 1.0
    # Only a hybrid's rejected tokens are taken back by re-running the accepted
    # ones (a K=3 draft after one step never has every round fully accepted).
    assert (report.rollback_forwards > 0) == hybrid, report.rollback_forwards


def test_qwen3_5_conversations_prepare_through_its_own_tokenizer(tmp_path):
    """transformers loads every ``qwen3_5`` tokenizer as ``Qwen3_5Tokenizer``
    (byte-level BPE), whatever the checkpoint names: the tiny builder's word-level
    one rendered each conversation to its special tokens alone."""
    from datasets import load_from_disk
    from transformers import AutoTokenizer

    from speculators_kimi.tiny_verifier.dataset import (
        _synthetic_conversations,
        prepare_synthetic_data,
    )

    verifier = tiny.qwen3_5(tmp_path / "verifier").path
    tokenizer = AutoTokenizer.from_pretrained(verifier)
    assert type(tokenizer).__name__ == "Qwen3_5Tokenizer"
    spec = tiny.TinyVerifierSpec(num_samples=4)
    data = prepare_synthetic_data(spec, verifier, tmp_path / "data")
    rows = load_from_disk(str(data)).with_format(None)
    rendered = {
        tokenizer.apply_chat_template(conversation, tokenize=False)
        for conversation in _synthetic_conversations(spec)
    }
    assert {tokenizer.decode(row["input_ids"]) for row in rows} == rendered
    assert all(sum(row["loss_mask"]) > 0 for row in rows)
