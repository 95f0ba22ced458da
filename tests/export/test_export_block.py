"""`speculators-kimi export` and `vllm-check` for the block drafters (dflash,
dflash2, dspark in the speculators format; xpress in vLLM's native layout), on
tiny random-weight drafts of a tiny Llama verifier: what the export writes and
refuses (in process), then every export checked with vLLM 0.34's own classes in
one scratch-env process (the shared scratch env of `test_export.py`), a flipped
causality flag, a mixer under the wrong name and an XPress served past its
block included."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from helpers import export_refusal, run
from safetensors.torch import load_file

from speculators_kimi.export import export_draft
from speculators_kimi.export.launch import launch_commands
from speculators_kimi.verifier.fit import DraftMismatchError
from speculators_kimi.vllm_check.verdict import problems

HUB_ID = "moonshotai/Kimi-K2.5"
MASK = 5
BLOCK = 4

#: Each draft: algorithm, layer types (None: all full attention), extra
#: config, whether it keeps the full vocabulary.
DRAFTS = {
    # All full attention: trained bidirectional in the block, while vLLM's DFlash
    # would read causal = not sliding_window_non_causal = true (the trap).
    "dflash": ("dflash", None, {"sliding_window_non_causal": False}, True),
    # Sliding layers trained bidirectional (dflash2's default).
    "dflash2": ("dflash2", ["sliding_attention"] * 2, {}, True),
    # A causal sliding layer beside a bidirectional full one, reduced vocabulary.
    "dspark": ("dspark", ["sliding_attention", "full_attention"], {}, False),
    # The same mix, full vocabulary (vLLM's XPress serves no other).
    "xpress": ("xpress", ["sliding_attention", "full_attention"], {}, True),
}
#: The drafts exported in the speculators format (xpress: native).
SPECULATORS_LAYOUT = ("dflash", "dflash2", "dspark")


def _draft(verifier: Path, out: Path, name: str, vocab: int) -> Path:
    """A random-weight draft of ``name`` saved as `speculators train` saves it."""
    from speculators import SpeculatorModel
    from transformers import Qwen3Config

    algorithm, layer_types, extra, full = DRAFTS[name]
    layer = Qwen3Config(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
        layer_types=layer_types,
        sliding_window=64 if layer_types else None,
        use_sliding_window=bool(layer_types),
    )
    draft_vocab = vocab if full else vocab // 2
    t2d = d2t = None
    if not full:
        t2d = torch.zeros(vocab, dtype=torch.bool)
        t2d[::2] = True
        d2t = torch.arange(draft_vocab) * 2 - torch.arange(draft_vocab)
    cls = SpeculatorModel.registry[algorithm]  # type: ignore[index]
    kwargs = dict(
        verifier_name_or_path=str(verifier),
        draft_vocab_size=draft_vocab,
        block_size=BLOCK,
        mask_token_id=MASK,
        target_layer_ids=[1, 2, 3],
        draft_attn_impl="eager",
        markov_rank=16,
        selector_rank=8,
        selector_top_k=4,
        conv_group_size=8,
        xpress_rank=32,
        **extra,
    )
    model = cls.from_training_args(layer, t2d=t2d, d2t=d2t, **kwargs)
    gen = torch.Generator().manual_seed(len(name))
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.startswith(("embed_tokens", "verifier_")) or (
                full and pname.startswith("lm_head")
            ):
                continue
            base = 1.0 if "norm" in pname else 0.0
            p.copy_(base + 0.2 * torch.randn(p.shape, generator=gen))
        if name == "xpress":  # the previous tokens lead the refiner's bias
            model.refiner_head.token_embed.weight.mul_(30.0)
    ckpt = out / name
    model.save_pretrained(ckpt)
    return ckpt


def _copied(src: Path, dest: Path) -> Path:
    """A copy of the directory ``src`` at ``dest``."""
    dest.mkdir()
    for item in src.iterdir():
        (dest / item.name).write_bytes(item.read_bytes())
    return dest


@pytest.fixture(scope="module")
def block_drafts(tmp_path_factory) -> dict[str, Path]:
    """A tiny Llama verifier (``"verifier"``) and one draft of each block
    drafter for it (see :data:`DRAFTS`)."""
    from speculators_kimi.tiny_verifier import TinyVerifierSpec, build_verifier

    root = tmp_path_factory.mktemp("block-drafts")
    spec = TinyVerifierSpec(
        hidden_size=32, intermediate_size=64, num_layers=4, num_words=56, num_samples=2
    )
    verifier = build_verifier(spec, root / "verifier")
    drafts = {name: _draft(verifier, root, name, spec.vocab_size) for name in DRAFTS}
    return {"verifier": Path(verifier), **drafts}


def test_block_exports_write_what_vllm_reads_and_refuse_what_it_cannot(
    block_drafts, tmp_path
):
    out = {}
    for name in SPECULATORS_LAYOUT:
        result = export_draft(block_drafts[name], tmp_path / name, verifier_id=HUB_ID)
        assert result.causality is not None
        out[name] = result
        config = json.loads((tmp_path / name / "config.json").read_text())
        assert config["speculators_config"]["verifier"]["name_or_path"] == HUB_ID
        assert config["aux_hidden_state_layer_ids"] == [1, 2, 3]
        assert config["mask_token_id"] == MASK
        assert config["transformer_layer_config"]["head_dim"] == 8
        tensors = load_file(tmp_path / name / "model.safetensors")
        assert "t2d" not in tensors and "embed_tokens.weight" not in tensors
        assert ("d2t" in tensors) == (name == "dspark")
        assert ("lm_head.weight" in tensors) == (name == "dspark")  # reduced vocab
        layer = config["transformer_layer_config"]
        if name == "dspark":
            # Causal sliding + bidirectional full: vLLM's DSpark layer-type rule.
            assert result.causality.layers == (True, False)
            assert "is_causal" not in layer
            assert config["sample_from_anchor"] is True
            assert config["enable_confidence_head"] is True
            assert config["confidence_head_with_markov"] is True
        else:
            assert result.causality.layers == (False, False)
            assert layer["is_causal"] is False
    # dflash2 is served under vLLM's method dflash.
    assert [out[n].method for n in SPECULATORS_LAYOUT] == ["dflash", "dflash", "dspark"]
    spec = json.loads(launch_commands(out["dflash2"])[1].split("'")[1])
    assert spec["method"] == "dflash" and spec["num_speculative_tokens"] == BLOCK - 1

    def refused(name: str, **changes: object) -> str:
        return export_refusal(block_drafts[name], tmp_path, HUB_ID, **changes)

    layer = json.loads((block_drafts["dflash"] / "config.json").read_text())[
        "transformer_layer_config"
    ]
    mixed = dict(
        layer,
        layer_types=["sliding_attention", "full_attention"],
        sliding_window=64,
        use_sliding_window=True,
    )
    assert "vLLM 0.34's DFlash gives every layer one causality" in refused(
        "dflash", transformer_layer_config=mixed
    )
    peagle = refused("dflash", speculators_model_type="peagle")
    assert "P-EAGLE (parallel drafting EAGLE-3) is not supported." in peagle
    assert "train --speculator-type eagle3" in peagle  # the fix, too
    assert "only the vanilla Markov head" in refused("dspark", markov_head_type="gated")
    assert "only the vanilla Markov head" in refused(
        "dspark",
        markov_rank=0,
        markov_head_type="vanilla",
        enable_confidence_head=False,
    )
    assert "sample_from_anchor=True is not supported for DFlash" in refused(
        "dflash", sample_from_anchor=True
    )

    # --verifier of another width: refused (it was ignored for the block drafters)
    other = tmp_path / "wider-verifier"
    other.mkdir()
    config = json.loads((block_drafts["verifier"] / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "hidden_size": 48}))
    with pytest.raises(DraftMismatchError, match=r"hidden size 32 \(verifier's 48\)"):
        export_draft(block_drafts["dspark"], tmp_path / "x", verifier=str(other))
    assert not (tmp_path / "x").exists()
    mine = str(block_drafts["verifier"])
    export_draft(
        block_drafts["dspark"], tmp_path / "ok", verifier_id=HUB_ID, verifier=mine
    )


def test_xpress_exports_in_vllms_native_layout_and_refuses_what_it_cannot(
    block_drafts, tmp_path
):
    """vLLM's Qwen3XPressForCausalLM reads a Qwen3 config of its own (its
    speculators parser has no xpress): the refiner under vLLM's names, the raw
    mixer as ``mix.L``, the block written twice (the refiner's and the served
    count), served as method dflash with B - 1 tokens."""
    result = export_draft(block_drafts["xpress"], tmp_path / "out", verifier_id=HUB_ID)
    assert (result.layout, result.method) == ("native", "dflash")
    assert result.architecture == "Qwen3XPressForCausalLM"
    assert result.num_speculative_tokens == BLOCK - 1
    # Causal sliding + bidirectional full: left to vLLM's layer-type rule.
    assert result.causality is not None and result.causality.layers == (True, False)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    trained = json.loads((block_drafts["xpress"] / "config.json").read_text())
    assert config["architectures"] == ["Qwen3XPressModel"]
    assert config["model_type"] == "qwen3" and "speculators_config" not in config
    assert "is_causal" not in config
    assert config["layer_types"] == ["sliding_attention", "full_attention"]
    assert config["dflash_config"] == {
        "mask_token_id": MASK,
        "target_layer_ids": [0, 1, 2],  # aux layers 1, 2, 3; vLLM adds one
        "use_aux_hidden_state": True,
    }
    assert (config["xpress_block_size"], config["num_speculative_steps"]) == (
        BLOCK,
        BLOCK - 1,
    )
    assert (config["xpress_rank"], config["xpress_mlp_hidden"]) == (32, 64)
    assert config["xpress_num_passes"] == trained["num_jacobi_passes"]
    vocab = trained["transformer_layer_config"]["vocab_size"]
    assert config["draft_vocab_size"] == config["vocab_size"] == vocab
    assert config["xpress_topc"] == min(512, vocab)
    assert config["sample_from_anchor"] is False and config["head_dim"] == 8
    tensors = load_file(tmp_path / "out" / "model.safetensors")
    mine = load_file(block_drafts["xpress"] / "model.safetensors")
    assert torch.equal(tensors["xpress_head.mix.L"], mine["refiner_head.mix_l"])
    assert torch.equal(
        tensors["xpress_head.w1.weight"], mine["refiner_head.token_embed.weight"]
    )
    assert torch.equal(
        tensors["xpress_head.w2.weight"], mine["refiner_head.readout.weight"]
    )
    assert "xpress_head.mlp.gate_proj.weight" in tensors
    assert not any(n.startswith("refiner_head.") for n in tensors)
    assert {"fc.weight", "hidden_norm.weight", "norm.weight"} <= set(tensors)
    assert not {"embed_tokens.weight", "lm_head.weight", "t2d", "d2t"} & set(tensors)
    (command,) = launch_commands(result)
    spec = json.loads(command.split("'")[1])
    assert spec["method"] == "dflash" and spec["num_speculative_tokens"] == BLOCK - 1

    def refused(**changes: object) -> str:
        return export_refusal(block_drafts["xpress"], tmp_path, HUB_ID, **changes)

    assert "requires a full-vocab draft" in refused(draft_vocab_size=vocab // 2)
    assert "fill-in layout" in refused(sample_from_anchor=True)
    assert "takes a power of two" in refused(xpress_rank=24)
    assert "multiple of 64" in refused(xpress_mlp_ratio=1)
    layer = trained["transformer_layer_config"]
    mla = refused(transformer_layer_config={**layer, "model_type": "deepseek_v3"})
    assert "only with Qwen3 layers" in mla


@pytest.mark.slow
def test_vllm_loads_block_exports_and_catches_a_flipped_causal_flag(
    block_drafts, tmp_path
):
    """vLLM 0.34's own DFlash, DFlash2, DSpark and XPress classes on CPU, every
    export in one scratch-env process: each loads fully and its block step
    (XPress: base logits and one refine pass) matches the training forward; the
    dflash export with its causality flipped (vLLM's default reading of the
    checkpoint, causal) does not, an XPress mixer under vLLM's folded name stays
    unloaded, and XPress served with a count other than its block is caught."""
    from safetensors.torch import save_file

    from speculators_kimi.vllm_check.env import default_env, ensure_env
    from speculators_kimi.vllm_check.request import CheckRequest

    def request(export: Path, name: str, **more) -> CheckRequest:
        verifier = str(block_drafts["verifier"])
        ckpt = str(block_drafts[name])
        return CheckRequest(str(export), ckpt, verifier, tokens=12, **more)

    requests = []
    for name in SPECULATORS_LAYOUT:
        export_draft(block_drafts[name], tmp_path / name, verifier_id=HUB_ID)
        requests.append(request(tmp_path / name, name))
    flipped = _copied(tmp_path / "dflash", tmp_path / "flipped")
    config = json.loads((flipped / "config.json").read_text())
    config["transformer_layer_config"].pop("is_causal")  # as the checkpoint reads
    (flipped / "config.json").write_text(json.dumps(config))
    requests.append(request(flipped, "dflash"))
    # The reduced-vocabulary dspark export without its head: vLLM's head (never
    # NaN-filled, vocabulary-sized) must be reported unloaded, not used as is.
    headless = _copied(tmp_path / "dspark", tmp_path / "headless")
    tensors = load_file(headless / "model.safetensors")
    del tensors["lm_head.weight"]
    save_file(tensors, headless / "model.safetensors")
    requests.append(request(headless, "dspark"))
    xpress = tmp_path / "xpress"
    export_draft(block_drafts["xpress"], xpress, verifier_id=HUB_ID)
    folded = _copied(xpress, tmp_path / "folded")
    tensors = load_file(folded / "model.safetensors")
    tensors["xpress_head.mix_L"] = tensors.pop("xpress_head.mix.L")
    save_file(tensors, folded / "model.safetensors")
    requests += [
        request(xpress, "xpress"),
        request(folded, "xpress"),
        request(xpress, "xpress", num_speculative_tokens=BLOCK),
    ]

    python = ensure_env(default_env("0.34.0"), "0.34.0")
    inner = [str(python), "-m", "speculators_kimi.vllm_check.inner"]
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = run(
        [*inner, json.dumps([asdict(r) for r in requests])], env=offline, timeout=600
    )
    reports = json.loads(proc.stdout.strip().splitlines()[-1])
    *good, flip, headless_report, xp, xp_folded, xp_past = reports
    classes = [
        "qwen3_dflash.DFlashQwen3ForCausalLM",
        "qwen3_dflash2.DFlash2Qwen3ForCausalLM",
        "qwen3_dspark.Qwen3DSparkForCausalLM",
    ]
    for name, report, cls in zip(SPECULATORS_LAYOUT, good, classes, strict=True):
        assert report["vllm"] == "0.34.0", name
        assert report["draft_module"].endswith(cls), name
        assert report["parameters_not_loaded"] == [], name
        assert report["embedding_rows_equal_ours"], name
        assert report["aux_states"] == "VerifierAux"
        assert report["causality"]["as_trained"], (name, report["causality"])
        step = report["one_step"]
        assert step["max_abs_logit_diff"] < 1e-4, (name, step)
        assert step["same_argmax"] and step["same_masked_tokens"], name
        assert problems(report) == [], name  # vllm-check exits 0
        assert report["serve"]["model"] == HUB_ID
    dflash, dflash2, dspark = good
    assert dflash2["serve"]["speculative"]["method"] == "dflash"
    assert dspark["serve"]["speculative"]["method"] == "dspark"
    # Full vocabulary: vLLM shares the verifier's embedding and head; reduced:
    # the embedding only (the draft's own head and d2t load from the export).
    assert dflash["shared_from_verifier"] == [
        "model.embed_tokens.weight",
        "lm_head.weight",
    ]
    assert dspark["shared_from_verifier"] == ["model.embed_tokens.weight"]
    assert dspark["parsed"]["is_causal"] is None
    assert dspark["causality"]["vllm"] == [True, False]
    assert dspark["one_step"]["max_abs_confidence_diff"] < 1e-5
    assert dflash["parsed"]["is_causal"] is False
    assert dflash["parsed"]["dflash_config"]["target_layer_ids"] == [0, 1, 2]
    assert any("rms_norm" in s for s in dflash["stubbed"])
    # Without the export's is_causal, vLLM reads the dflash draft as causal.
    assert flip["causality"]["vllm"] == [True, True]
    assert not flip["causality"]["as_trained"]
    assert flip["one_step"]["max_abs_logit_diff"] > 1e-2, flip["one_step"]
    assert any("causality [True, True]" in line for line in problems(flip))
    assert headless_report["parameters_not_loaded"] == ["lm_head.weight"]
    assert any("did not load" in line for line in problems(headless_report))
    # XPress: the native layout picks vLLM's XPress speculator under method
    # dflash; every parameter loaded (the raw mixer folded), the refined logits
    # of one pass equal training's, causality by layer type as trained.
    assert xp["draft_module"].endswith("qwen3_xpress.Qwen3XPressForCausalLM")
    assert xp["serve"] == {
        "method": "dflash",
        "speculator_config": "XPressSpeculatorConfig",
        "num_speculative_tokens": BLOCK - 1,
        "xpress_block_size": BLOCK,
    }
    assert xp["parameters_not_loaded"] == []
    assert xp["shared_from_verifier"] == ["model.embed_tokens.weight", "lm_head.weight"]
    assert xp["causality"] == {
        "trained": [True, False],
        "vllm": [True, False],
        "as_trained": True,
    }
    assert xp["aux_layers"]["vllm"] == xp["aux_layers"]["trained"] == [1, 2, 3]
    step = xp["one_step"]
    assert step["max_rel_logit_diff"] < 1e-5 and step["same_argmax"], step
    assert step["base_max_rel_logit_diff"] < 1e-5, step
    # The block vLLM's own Jacobi kernels draft (Triton's interpreter) is
    # evaluate's, and the refiner changed it from the base argmax.
    jacobi = xp["jacobi"]
    assert (jacobi["passes"], jacobi["topc"]) == (6, xp["parsed"]["xpress_topc"])
    assert jacobi["vllm"] == jacobi["evaluate"] and jacobi["same"], jacobi
    assert jacobi["vllm"] != jacobi["base_argmax"], jacobi
    assert problems(xp) == []
    # vLLM drops a mixer stored folded (mix_L): it stays NaN, and is reported.
    assert xp_folded["parameters_not_loaded"] == ["model.xpress_head.mix_L"]
    assert any("did not load" in line for line in problems(xp_folded))
    assert any(
        f"serve it with num_speculative_tokens {BLOCK - 1}" in line
        for line in problems(xp_past)
    )
