"""`speculators-kimi export` and `vllm-check` for the MLA DSpark draft
(`--speculator-type dspark --draft-arch deepseek_v3`) on the tiny Kimi-K2.5:
the native ``k3_dspark`` layout vLLM 0.34 serves with ``K3DSparkForCausalLM``,
what the export refuses, and the export loaded into vLLM's own class on CPU
(every parameter loaded, one block step's logits with the Markov bias equal to
upstream's training forward); and an XPress draft of it (Qwen3 layers) in
vLLM's native XPress layout, checked the same way."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import edited_copy, export_refusal, run
from safetensors.torch import load_file

from speculators_kimi import tiny_verifier as tiny
from speculators_kimi.export import export_draft
from speculators_kimi.export.launch import launch_commands
from speculators_kimi.vllm_check.verdict import problems

HUB_ID = "moonshotai/Kimi-K2.5"
BLOCK = 4


def _train_built(
    verifier: Path, data: Path, algorithm: str, *extra: str, arch: str = "deepseek_v3"
) -> Any:
    """The draft ``speculators train`` builds (its own functions), moved away
    from its initial weights, the verifier's tensors left exact."""
    from speculators.model import SpeculatorModel
    from speculators.train import cli
    from speculators.train.config import TrainConfig

    data.mkdir(exist_ok=True)
    argv = ["--verifier-name-or-path", str(verifier), "--data-path", str(data)]
    argv += ["--speculator-type", algorithm, "--draft-arch", arch]
    argv += ["--block-size", str(BLOCK), "--num-layers", "2", *extra]
    args = argparse.Namespace(**TrainConfig.resolve(argv).flatten())
    d2t, t2d, vocab = cli.parse_vocab_mappings(args)
    torch.manual_seed(0)
    model_class = SpeculatorModel.registry[algorithm]
    draft = cli.build_draft_model(args, model_class, t2d, d2t, vocab)
    with torch.no_grad():
        for name, p in draft.named_parameters():
            if p.requires_grad and not name.startswith(("embed", "lm_head")):
                p.add_(torch.randn_like(p) * 0.05)
    return draft


@pytest.fixture(scope="module")
def mla(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("k3-dspark")
    verifier = tiny.kimi_k25(root / "verifier").path
    out = {"verifier": verifier}
    for algorithm in ("dspark", "dflash"):
        draft = _train_built(verifier, root / "data", algorithm)
        draft.save_pretrained(root / algorithm)
        out[algorithm] = root / algorithm
    # XPress, whose vLLM class is Qwen3 only: Qwen3 layers on the MLA verifier.
    xpress = _train_built(
        verifier, root / "data", "xpress", "--xpress-rank", "32", arch="qwen3"
    )
    xpress.save_pretrained(root / "xpress")
    out["xpress"] = root / "xpress"
    return out


def test_mla_dspark_exports_as_k3_dspark(mla, tmp_path):
    result = export_draft(mla["dspark"], tmp_path / "out", verifier_id=HUB_ID)
    assert result.layout == "native" and result.method == "dspark"
    assert result.architecture == "K3DSparkForCausalLM"
    assert result.causality is not None and result.causality.layers == (False,) * 2
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    trained = json.loads((mla["dspark"] / "config.json").read_text())
    text = json.loads((mla["verifier"] / "config.json").read_text())["text_config"]
    assert config["model_type"] == "k3_dspark"
    assert config["architectures"] == ["K3DSparkModel"]
    for name in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim"):
        assert config[name] == text[name], name
    for name in ("qk_rope_head_dim", "v_head_dim", "num_attention_heads"):
        assert config[name] == text[name], name
    assert config["rope_parameters"] == text["rope_parameters"]
    assert config["rope_interleave"] is True
    assert config["num_hidden_layers"] == 2
    assert config["draft_vocab_size"] == config["vocab_size"] == text["vocab_size"]
    aux = trained["aux_hidden_state_layer_ids"]
    assert config["target_layer_ids"] == [i - 1 for i in aux]
    assert config["num_target_layers"] == len(aux)
    assert config["target_hidden_size"] == text["hidden_size"]
    assert config["mask_token_id"] == trained["mask_token_id"]
    assert config["block_size"] == BLOCK
    assert config["sample_from_anchor"] is True
    assert config["n_routed_experts"] == 0
    tensors = load_file(tmp_path / "out" / "model.safetensors")
    assert {"context_proj.weight", "context_norm.weight", "final_norm.weight"} <= set(
        tensors
    )
    assert "markov_head.markov_w1.weight" in tensors
    assert "layers.1.self_attn.kv_a_proj_with_mqa.weight" in tensors
    assert not any(n.startswith(("fc.", "hidden_norm", "norm.")) for n in tensors)
    assert not {"embed_tokens.weight", "lm_head.weight", "d2t", "t2d"} & set(tensors)
    # Served with the verifier as the target: method dspark, one block.
    (command,) = launch_commands(result)
    assert command.startswith(f"vllm serve {HUB_ID} --speculative-config")
    spec = json.loads(command.split("'")[1])
    assert spec["method"] == "dspark" and spec["num_speculative_tokens"] == BLOCK


def test_export_refuses_what_k3_dspark_cannot_serve(mla, tmp_path):
    def refused(name: str, **changes: object) -> str:
        return export_refusal(mla[name], tmp_path, HUB_ID, **changes)

    assert "DFlash drafts only with Qwen3 layers" in refused("dflash")
    assert "draft_vocab_size == vocab_size" in refused("dspark", draft_vocab_size=256)
    assert "only the vanilla Markov head" in refused("dspark", markov_head_type="gated")


@pytest.mark.slow
def test_vllm_k3_dspark_loads_the_export_and_matches_a_block_step(mla, tmp_path):
    """vLLM 0.34's ``K3DSparkForCausalLM`` on CPU (scratch env): the export
    parses as ``K3DSparkConfig``, every parameter is loaded, the latent KV pages
    are ``kv_lora_rank + qk_rope_head_dim`` wide, vLLM captures the aux layers
    the draft was trained on, and one block step's logits (Markov bias
    included) and confidences equal upstream's training forward, with default
    rope and with Kimi-K2.5's YaRN past its original length. The same export
    with ``target_layer_ids`` not shifted by one, and served past its block, is
    caught."""
    from speculators_kimi.vllm_check.env import default_env, ensure_env
    from speculators_kimi.vllm_check.request import CheckRequest

    export_draft(mla["dspark"], tmp_path / "out", verifier_id=HUB_ID)
    shifted = edited_copy(tmp_path / "out", tmp_path / "shifted")
    config = json.loads((shifted / "config.json").read_text())
    config["target_layer_ids"] = [i + 1 for i in config["target_layer_ids"]]
    (shifted / "config.json").write_text(json.dumps(config))
    # Kimi-K2.5's rope (YaRN, mscale 1 and 1, beta 1 and 1) at a smaller
    # factor, over positions past its original length: vLLM's deepseek_yarn.
    layer = json.loads((mla["dspark"] / "config.json").read_text())[
        "transformer_layer_config"
    ]
    yarn = {"rope_type": "yarn", "rope_theta": 50000.0, "factor": 8.0}
    yarn |= {"original_max_position_embeddings": 128, "beta_fast": 1.0}
    yarn |= {"beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}
    yarn_ckpt = edited_copy(
        mla["dspark"],
        tmp_path / "yarn-ckpt",
        transformer_layer_config={**layer, "rope_parameters": yarn},
    )
    export_draft(yarn_ckpt, tmp_path / "yarn", verifier_id=HUB_ID)
    ckpt, verifier = str(mla["dspark"]), str(mla["verifier"])
    requests = [
        CheckRequest(str(tmp_path / "out"), ckpt, verifier, tokens=12),
        # and served past the trained block (the flag was ignored)
        CheckRequest(
            str(shifted), ckpt, verifier, tokens=12, num_speculative_tokens=BLOCK + 1
        ),
    ]
    requests.append(
        CheckRequest(
            str(tmp_path / "yarn"), str(yarn_ckpt), str(mla["verifier"]), tokens=160
        )
    )
    # An XPress draft of the Kimi-K2.5 (Qwen3 layers): vLLM's native XPress.
    export_draft(mla["xpress"], tmp_path / "xpress", verifier_id=HUB_ID)
    xpress_ckpt = str(mla["xpress"])
    requests.append(
        CheckRequest(str(tmp_path / "xpress"), xpress_ckpt, verifier, tokens=12)
    )
    python = ensure_env(default_env("0.34.0"), "0.34.0")
    inner = [str(python), "-m", "speculators_kimi.vllm_check.inner"]
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = run(
        [*inner, json.dumps([asdict(r) for r in requests])], env=offline, timeout=600
    )
    report, wrong, yarned, xpress = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["vllm"] == "0.34.0"
    assert report["draft_module"].endswith("dspark_mla.K3DSparkForCausalLM")
    assert report["parsed"]["hf_config_class"] == "K3DSparkConfig"
    assert report["parameters_not_loaded"] == []
    assert report["serve"] == {
        "method": "dspark",
        "num_speculative_tokens": BLOCK,  # vLLM's default: the block size
        "block_size": BLOCK,
        "use_mla": True,
    }
    text = json.loads((mla["verifier"] / "config.json").read_text())["text_config"]
    width = text["kv_lora_rank"] + text["qk_rope_head_dim"]
    assert all(page[-1] == width for page in report["kv_cache_pages"])
    assert report["aux_layers"]["vllm"] == report["aux_layers"]["trained"]
    step = report["one_step"]
    assert step["max_abs_logit_diff"] < 1e-4, step
    assert step["same_argmax"] and step["same_masked_tokens"]
    assert step["max_abs_confidence_diff"] < 1e-5
    assert any("MultiHeadLatentAttention._attention" in s for s in report["stubbed"])
    assert problems(report) == []  # vllm-check exits 0
    assert wrong["aux_layers"]["vllm"] != wrong["aux_layers"]["trained"]
    assert any("the verifier's layers" in line for line in problems(wrong))
    assert wrong["serve"]["num_speculative_tokens"] == BLOCK + 1
    assert any(f"past the block of {BLOCK}" in line for line in problems(wrong))
    assert yarned["parsed"]["rope_parameters"]["rope_type"] == "yarn"
    assert yarned["parameters_not_loaded"] == []
    assert yarned["one_step"]["max_rel_logit_diff"] < 1e-5, yarned["one_step"]
    assert yarned["one_step"]["same_argmax"]
    assert xpress["draft_module"].endswith("Qwen3XPressForCausalLM")
    assert xpress["target_config"] != verifier  # the multimodal Kimi's text stand-in
    assert xpress["parameters_not_loaded"] == []
    assert xpress["aux_layers"]["vllm"] == xpress["aux_layers"]["trained"]
    assert xpress["causality"]["as_trained"]
    assert xpress["one_step"]["max_rel_logit_diff"] < 1e-5, xpress["one_step"]
    assert xpress["one_step"]["same_argmax"]
    assert problems(xpress) == []
