"""`speculators-kimi export`: a trained checkpoint as `vllm serve` takes it,
checked with vLLM 0.33's own code (its parser and its EAGLE-3 draft class)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import BIN, SUPPORT, edited_copy, run, snapshot
from safetensors.torch import load_file
from speculators.models.eagle3.model_definitions import MLA_FIELDS

from speculators_kimi import cli
from speculators_kimi.export import ExportError, export_draft, hub_id_of

HUB_ID = "moonshotai/Kimi-K2.5"


def _digests(path: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in path.iterdir()
        if p.is_file()
    }


def test_export_writes_what_vllm_reads(trained_demo, tmp_path):
    verifier = Path(trained_demo["verifier"])
    ckpt = Path(trained_demo["checkpoint"])
    before = _digests(ckpt)
    cmd = [str(BIN / "speculators-kimi"), "export", str(ckpt)]

    # The checkpoint records the verifier's local path: no Hub id, a clear error.
    refused = run([*cmd, "--out", str(tmp_path / "no")], check=False)
    assert refused.returncode == 1
    assert "--verifier-id ORG/NAME" in refused.stderr
    assert str(verifier) in refused.stderr
    assert not (tmp_path / "no").exists()

    out = tmp_path / "serve"
    proc = run([*cmd, "--out", str(out), "--verifier-id", HUB_ID])
    assert f"vllm serve {out.resolve()}" in proc.stdout
    spec = json.dumps(
        {"model": str(out.resolve()), "method": "eagle3", "num_speculative_tokens": 3}
    )
    assert f"vllm serve {HUB_ID} --speculative-config '{spec}'" in proc.stdout

    config = json.loads((out / "config.json").read_text())
    trained = json.loads((ckpt / "config.json").read_text())
    assert config["speculators_config"]["verifier"]["name_or_path"] == HUB_ID
    layer = config["transformer_layer_config"]
    # Explicit geometry: the draft's head_dim is not hidden/heads here.
    assert layer["head_dim"] == trained["transformer_layer_config"]["head_dim"]
    assert layer["head_dim"] != layer["hidden_size"] // layer["num_attention_heads"]
    assert config["draft_vocab_size"] == 256 < layer["vocab_size"]
    assert config["target_hidden_size"] == layer["hidden_size"]
    assert config["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]

    tensors = load_file(out / "model.safetensors")
    saved = load_file(ckpt / "model.safetensors")
    assert "embed_tokens.weight" not in tensors  # the verifier's: vLLM shares it
    assert "t2d" not in tensors
    assert torch.equal(tensors["d2t"], saved["d2t"])
    # d2t maps the draft vocabulary onto the data's most frequent tokens.
    t2d = np.load(Path(trained_demo["data"]) / "t2d-256.npy")
    targets = torch.arange(256) + tensors["d2t"]
    assert torch.equal(targets, torch.from_numpy(np.flatnonzero(t2d)))
    for name, tensor in tensors.items():
        assert torch.equal(tensor, saved[name]), name
    # The trained checkpoint stays as upstream wrote it.
    assert _digests(ckpt) == before

    kept = tmp_path / "kept"
    export_draft(ckpt, kept, verifier_id=HUB_ID, keep_embeddings=True)
    assert "embed_tokens.weight" in load_file(kept / "model.safetensors")

    with pytest.raises(ExportError, match="ORG/NAME"):
        export_draft(ckpt, tmp_path / "x", verifier_id=str(verifier))
    with pytest.raises(ExportError, match=f"--out {ckpt} is the checkpoint"):
        export_draft(ckpt, ckpt, verifier_id=HUB_ID)
    run_dir = tmp_path / "checkpoints"
    (run_dir / "checkpoint_best").mkdir(parents=True)
    (run_dir / "checkpoint_best" / "config.json").write_text("{}")
    with pytest.raises(ExportError, match="a run's checkpoints directory; export"):
        export_draft(run_dir, tmp_path / "y", verifier_id=HUB_ID)


def test_export_refuses_a_non_empty_out_and_overwrite_replaces_it_whole(
    tiny_draft_checkpoint, tmp_path, capsys
):
    from speculators_kimi.cli import main

    out = tmp_path / "serve"
    out.mkdir()
    (out / "config.json").write_text('{"mine": true}\n')
    (out / "notes.txt").write_text("the user's\n")
    before = snapshot(out)
    argv = ["export", str(tiny_draft_checkpoint), "--out", str(out)]
    argv += ["--verifier-id", HUB_ID]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"--out {out} is not empty (config.json, notes.txt)" in err
    assert "--overwrite" in err
    assert snapshot(out) == before

    export_draft(tiny_draft_checkpoint, out, verifier_id=HUB_ID, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "config.py",
        "model.safetensors",
    ]
    # readable as a plain mkdir and open leave it (not mkdtemp's 0700 and
    # safetensors' 0600): a server running as another user reads it
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o777 & ~umask
    for path in out.iterdir():
        assert path.stat().st_mode & 0o777 == 0o666 & ~umask, path
    config = json.loads((out / "config.json").read_text())
    assert config["speculators_config"]["verifier"]["name_or_path"] == HUB_ID
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint",
        "serve",
        "verifier",
    ]


def test_overwrite_never_replaces_the_run_it_exports_from(
    tiny_draft_checkpoint, tmp_path
):
    """``--out`` holding the checkpoint, or any training run, is refused even
    with ``--overwrite``: it replaced the whole run with the export."""
    run = tmp_path / "run" / "checkpoints"
    epoch = run / "7"
    shutil.copytree(tiny_draft_checkpoint, epoch)
    (epoch / "training_state.json").write_text("{}")
    before = snapshot(tmp_path / "run")
    with pytest.raises(ExportError, match=f"--out {run} holds the checkpoint"):
        export_draft(epoch, run, verifier_id=HUB_ID, overwrite=True)
    other = tmp_path / "other"
    shutil.copytree(tiny_draft_checkpoint, other)
    with pytest.raises(ExportError, match="holds a training run .* even with"):
        export_draft(other, run, verifier_id=HUB_ID, overwrite=True)
    assert snapshot(tmp_path / "run") == before
    # A whole run (its checkpoints one level down) is no export either: it was
    # replaced by the export, checkpoints, logs and all.
    with pytest.raises(ExportError, match=r"holds directories \(checkpoints\)"):
        export_draft(other, tmp_path / "run", verifier_id=HUB_ID, overwrite=True)
    assert snapshot(tmp_path / "run") == before
    # Nor the verifier it reads (files only, like an export): it was replaced.
    verifier = tiny_draft_checkpoint.parent / "verifier"
    kept = snapshot(verifier)
    for given in (None, str(verifier)):
        with pytest.raises(ExportError, match=f"--out {verifier} is the verifier"):
            export_draft(
                other, verifier, verifier=given, verifier_id=HUB_ID, overwrite=True
            )
    assert snapshot(verifier) == kept


def test_out_holding_the_working_directory_is_refused(
    tiny_draft_checkpoint, tmp_path, monkeypatch
):
    """``--out .`` renamed the working directory aside: a traceback (``Device or
    resource busy``) and a stray ``..old-*`` directory."""
    here = tmp_path / "above" / "here"
    here.mkdir(parents=True)
    monkeypatch.chdir(here)
    for out in (Path(), Path("..")):  # --out . and --out ..
        with pytest.raises(ExportError, match="holds the working directory"):
            export_draft(tiny_draft_checkpoint, out, verifier_id=HUB_ID)
    assert list((tmp_path / "above").iterdir()) == [here]
    assert list(here.iterdir()) == []
    export_draft(tiny_draft_checkpoint, Path("serve"), verifier_id=HUB_ID)
    assert (here / "serve" / "model.safetensors").is_file()


def _damage(checkpoint: Path, how: str) -> None:
    config = checkpoint / "config.json"
    weights = checkpoint / "model.safetensors"
    if how == "torn weights":
        weights.write_bytes(weights.read_bytes()[:100])
    elif how == "no weights":
        weights.unlink()
    elif how == "config not json":
        config.write_text(config.read_text()[:-20])
    else:  # no speculators_config
        data = json.loads(config.read_text())
        del data["speculators_config"]
        config.write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("torn weights", "model.safetensors is torn or not a safetensors file"),
        ("no weights", "no model.safetensors; is the checkpoint complete?"),
        ("config not json", "config.json is not valid JSON"),
        ("no speculators_config", "has no speculators_config with proposal_methods"),
    ],
)
def test_a_damaged_checkpoint_is_named_in_one_line(
    tiny_draft_checkpoint, tmp_path, capsys, how, message
):
    """Each was a traceback (SafetensorError, FileNotFoundError,
    JSONDecodeError, KeyError) that did not name the file."""
    from speculators_kimi.cli import main

    _damage(tiny_draft_checkpoint, how)
    argv = ["export", str(tiny_draft_checkpoint), "--out", str(tmp_path / "o")]
    assert main([*argv, "--verifier-id", HUB_ID]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()


def test_export_killed_while_writing_keeps_the_previous_export(
    tiny_draft_checkpoint, tmp_path, monkeypatch
):
    import safetensors.torch

    out = tmp_path / "serve"
    export_draft(tiny_draft_checkpoint, out, verifier_id=HUB_ID)
    before = snapshot(out)

    def torn_write(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"torn")
        raise KeyboardInterrupt

    monkeypatch.setattr(safetensors.torch, "save_file", torn_write)
    with pytest.raises(KeyboardInterrupt):
        export_draft(tiny_draft_checkpoint, out, verifier_id=HUB_ID, overwrite=True)
    assert snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint",
        "serve",
        "verifier",
    ]


def test_verifier_hub_id_from_its_origin(tmp_path):
    snapshot = tmp_path / "hub" / "models--moonshotai--Kimi-K2.5" / "snapshots" / "ab12"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    assert hub_id_of(str(snapshot)) == HUB_ID
    local = tmp_path / "local"
    local.mkdir()
    (local / "config.json").write_text(json.dumps({"_name_or_path": "org/model"}))
    assert hub_id_of(str(local)) == "org/model"
    (local / "config.json").write_text(json.dumps({"_name_or_path": str(local)}))
    assert hub_id_of(str(local)) is None
    assert hub_id_of("org/model") == "org/model"


def test_an_export_loads_as_the_draft_it_came_from(tiny_draft_checkpoint, tmp_path):
    """An export drops t2d (vLLM reads d2t alone): `evaluate --draft EXPORT` read
    the verifier head rows through uninitialized memory (a shape error naming
    another count each run). Unit 0007 sets t2d from d2t."""
    from speculators_kimi.evaluate.session import load_draft

    out = tmp_path / "serve"
    export_draft(tiny_draft_checkpoint, out, verifier_id=HUB_ID)
    verifier = tmp_path / "verifier"
    trained = load_draft(tiny_draft_checkpoint, verifier=verifier).state_dict()
    exported = load_draft(out, verifier=verifier).state_dict()
    assert trained.keys() == exported.keys()
    for name, tensor in trained.items():
        assert torch.equal(exported[name], tensor), name


def test_a_verifier_that_is_not_there_is_refused(tiny_draft_checkpoint, tmp_path):
    with pytest.raises(ExportError, match="--verifier nope: no such directory"):
        export_draft(tiny_draft_checkpoint, tmp_path / "out", verifier="nope")
    assert not (tmp_path / "out").exists()


def test_a_relative_verifier_path_is_no_hub_id_from_elsewhere(
    tiny_draft_checkpoint, tmp_path, monkeypatch
):
    """A draft trained with ``--verifier-name-or-path demo/verifier``, exported
    from another directory with ``--verifier`` naming that copy: the record read
    as the Hub id ``demo/verifier``, and ``vllm serve demo/verifier`` was printed."""
    local = tmp_path / "demo" / "verifier"
    shutil.copytree(tmp_path / "verifier", local)
    draft = edited_copy(tiny_draft_checkpoint, tmp_path / "draft")
    config = json.loads((draft / "config.json").read_text())
    config["speculators_config"]["verifier"]["name_or_path"] = "demo/verifier"
    (draft / "config.json").write_text(json.dumps(config))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with pytest.raises(ExportError, match="pass --verifier-id ORG/NAME"):
        export_draft(draft, tmp_path / "out", verifier=str(local))
    # From where the relative path resolves it was never taken for an id.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ExportError, match="pass --verifier-id ORG/NAME"):
        export_draft(draft, tmp_path / "out")


def _vllm_check(
    ckpt: Path, out: Path, verifier: str, tmp_path: Path, *extra: str
) -> dict:
    """Export ``ckpt`` into ``out`` and run `speculators-kimi vllm-check` on it
    (vLLM 0.34.0, the default)."""
    export_draft(ckpt, out, verifier_id=HUB_ID)
    report_file = tmp_path / "vllm.json"
    argv = [str(out), "--checkpoint", str(ckpt), "--verifier", verifier]
    assert cli.main(["vllm-check", *argv, "--json", str(report_file), *extra]) == 0
    report = json.loads(report_file.read_text())
    assert report["vllm"] == "0.34.0"
    return report


@pytest.mark.slow
def test_vllm_accepts_and_loads_the_export(trained_demo, tmp_path):
    """vLLM 0.34's own code on CPU: `speculators-kimi vllm-check` (see
    `speculators_kimi/vllm_check/__init__.py` for what is stubbed: only the paged
    Attention layer)."""
    ckpt = Path(trained_demo["checkpoint"])
    out = tmp_path / "serve"
    report = _vllm_check(ckpt, out, trained_demo["verifier"], tmp_path)
    parsed = report["parsed"]
    layer = json.loads((out / "config.json").read_text())["transformer_layer_config"]
    assert parsed["architectures"] == ["Eagle3LlamaForCausalLM"]
    assert parsed["head_dim"] == layer["head_dim"]
    assert parsed["draft_vocab_size"] == 256
    assert parsed["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]
    # `vllm serve DIR`: the verifier is served, the export is its eagle3 draft.
    assert report["serve"]["model"] == HUB_ID
    assert report["serve"]["speculative"] == {
        "method": "eagle3",
        "num_speculative_tokens": 3,
        "model": str(out),
    }
    # The checkpoint as trained is what vLLM refuses.
    assert "must name a remote model repository" in report["checkpoint_refused"]
    # Every parameter of vLLM's draft came from the export, but the embedding,
    # which it shares from the verifier.
    assert report["parameters_not_loaded"] == []
    assert report["shared_from_verifier"] == ["model.embed_tokens.weight"]
    # vLLM 0.34's own loader decides so too: with no embedding in the export, the
    # verifier's is shared, a quantized one included.
    assert report["embedding_sharing"] == {"plain": "target", "quantized": "target"}
    assert report["aux_states"] == "VerifierAux"
    step = report["one_step"]
    assert step["max_abs_logit_diff"] < 1e-4, step
    assert step["same_argmax"] and step["same_masked_tokens"]


#: The MLA fields of a DeepSeek-V3 layer vLLM's DeepseekV2MLAAttention reads.
SERVED_MLA_FIELDS = (
    *MLA_FIELDS,
    "rope_parameters",
    "rope_interleave",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_hidden_layers",
    "rms_norm_eps",
    "hidden_act",
)


def _mla_layer_tensors(q_lora: bool) -> set[str]:
    attn = ["kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj", "o_proj"]
    attn += ["q_a_proj", "q_a_layernorm", "q_b_proj"] if q_lora else ["q_proj"]
    return {
        *(f"layers.0.self_attn.{name}.weight" for name in attn),
        *(
            f"layers.0.mlp.{name}.weight"
            for name in ("gate_proj", "up_proj", "down_proj")
        ),
        *(
            f"layers.0.{name}.weight"
            for name in ("input_layernorm", "hidden_norm", "post_attention_layernorm")
        ),
        "fc.weight",
        "norm.weight",
        "lm_head.weight",
        "d2t",
    }


def test_mla_export_writes_vllms_native_config(trained_mla_demo, tmp_path):
    """An MLA draft: the native config vLLM's Eagle3DeepseekV3ForCausalLM reads,
    served only through --speculative-config."""
    ckpt = Path(trained_mla_demo["checkpoint"])
    trained = json.loads((ckpt / "config.json").read_text())
    layer = trained["transformer_layer_config"]
    assert layer["model_type"] == "deepseek_v3"
    assert not trained["norm_before_fc"]
    before = _digests(ckpt)

    out = tmp_path / "serve"
    proc = run(
        [str(BIN / "speculators-kimi"), "export", str(ckpt), "--out", str(out)]
        + ["--verifier-id", HUB_ID]
    )
    spec = json.dumps(
        {"model": str(out.resolve()), "method": "eagle3", "num_speculative_tokens": 3}
    )
    assert f"vllm serve {HUB_ID} --speculative-config '{spec}'" in proc.stdout
    assert f"vllm serve {out.resolve()}\n" not in proc.stdout
    assert "cannot detect it as a draft from `vllm serve DIR`" in proc.stdout

    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["Eagle3DeepseekV3ForCausalLM"]
    # deepseek_v3 is rewritten into vLLM's MTP draft, kimi_k2 is not MLA there.
    assert config["model_type"] == "deepseek_v2"
    for key in SERVED_MLA_FIELDS:
        assert config[key] == layer[key], key
    assert config["q_lora_rank"] and config["kv_lora_rank"]
    assert config["rope_interleave"] is True
    assert config["rope_parameters"]["rope_type"] == "default"
    assert config["vocab_size"] == 512  # the target's
    assert config["draft_vocab_size"] == 256
    assert config["target_hidden_size"] == layer["hidden_size"]
    aux = trained["eagle_aux_hidden_state_layer_ids"]
    assert aux == [2, 4, 5]
    assert config["eagle_aux_hidden_state_layer_ids"] == aux
    assert config["eagle_config"] == {"eagle_aux_hidden_state_layer_ids": aux}
    for key in ("norm_output", "fc_norm", "norm_before_residual"):
        assert config[key] is trained[key], key
    assert "speculators_config" not in config and "auto_map" not in config
    assert not (out / "config.py").exists()
    # Only what describes the draft: dense (no experts), no MTP layer, the
    # verifier's own token ids, no DeepSeek-V3 class defaults.
    for key in ("n_routed_experts", "n_group", "topk_group", "routed_scaling_factor"):
        assert key not in config, key
    assert "num_nextn_predict_layers" not in config
    verifier = json.loads(
        (Path(trained_mla_demo["verifier"]) / "config.json").read_text()
    )
    text = verifier.get("text_config", verifier)
    for key in ("bos_token_id", "eos_token_id"):
        assert config.get(key) == text.get(key, verifier.get(key)), key

    tensors = load_file(out / "model.safetensors")
    saved = load_file(ckpt / "model.safetensors")
    assert set(tensors) == _mla_layer_tensors(q_lora=True)
    assert {"t2d", "embed_tokens.weight"} <= set(saved)  # both dropped
    for name, tensor in tensors.items():
        assert torch.equal(tensor, saved[name]), name
    hidden = layer["hidden_size"]
    attn = "layers.0.self_attn."
    # Layer 0's down-projections read cat([embeds, hidden]).
    assert tensors[attn + "q_a_proj.weight"].shape == (layer["q_lora_rank"], 2 * hidden)
    assert tensors[attn + "kv_a_proj_with_mqa.weight"].shape == (
        layer["kv_lora_rank"] + layer["qk_rope_head_dim"],
        2 * hidden,
    )
    assert tensors["fc.weight"].shape == (hidden, len(aux) * hidden)
    assert _digests(ckpt) == before


def test_mla_export_refuses_norm_before_fc(trained_mla_demo, tmp_path):
    """vLLM's MLA EAGLE-3 class has no input norm before fc: refused, not dropped."""
    from safetensors.torch import save_file

    ckpt = Path(trained_mla_demo["checkpoint"])
    copy = tmp_path / "ckpt"
    copy.mkdir()
    for item in ckpt.iterdir():
        if item.is_file():
            (copy / item.name).write_bytes(item.read_bytes())
    config = json.loads((copy / "config.json").read_text())
    config["norm_before_fc"] = True
    (copy / "config.json").write_text(json.dumps(config))
    tensors = load_file(copy / "model.safetensors")
    width = tensors["fc.weight"].shape[1]
    tensors["input_norm.weight"] = torch.ones(width, dtype=tensors["fc.weight"].dtype)
    save_file(tensors, str(copy / "model.safetensors"))

    with pytest.raises(ExportError) as refused:
        export_draft(copy, tmp_path / "out", verifier_id=HUB_ID)
    message = str(refused.value)
    assert "Eagle3DeepseekV3ForCausalLM has no input norm before fc" in message
    assert "retrain the draft without --norm-before-fc" in message
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_vllm_loads_the_mla_export(trained_mla_demo, tmp_path):
    """vLLM 0.34's own code on CPU, as `vllm serve VERIFIER --speculative-config`
    builds the draft: its config handling, its Eagle3DeepseekV3ForCausalLM, its
    load_weights (see speculators_kimi/vllm_check: only MLAAttention is stubbed). The
    aux states are synthetic (the mode for a real-size verifier); the Llama
    layout's test feeds the verifier's own."""
    ckpt = Path(trained_mla_demo["checkpoint"])
    out = tmp_path / "serve"
    report = _vllm_check(
        ckpt, out, trained_mla_demo["verifier"], tmp_path, "--synthetic-aux-states"
    )
    assert report["layout"] == "native"
    assert report["aux_states"] == "SyntheticAux"
    parsed = report["parsed"]
    layer = json.loads((ckpt / "config.json").read_text())["transformer_layer_config"]
    # vLLM's EAGLEConfig wraps the draft's config; its MLA detection accepts it.
    assert parsed["hf_config_class"] == "EAGLEConfig"
    assert parsed["wrapped_model_type"] == "deepseek_v2"
    assert parsed["architecture"] == "Eagle3DeepseekV3ForCausalLM"
    assert parsed["use_mla"] is True
    assert parsed["head_size"] == layer["kv_lora_rank"] + layer["qk_rope_head_dim"]
    for key in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "v_head_dim"):
        assert parsed[key] == layer[key], key
    assert parsed["draft_vocab_size"] == 256 and parsed["vocab_size"] == 512
    assert parsed["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]
    assert report["draft_module"].endswith(
        "deepseek_eagle3.Eagle3DeepseekV2ForCausalLM"
    )
    # Why the export is not labelled deepseek_v3, and why `vllm serve DIR` is no way.
    assert "Eagle3DeepSeekMTPModel" in report["deepseek_v3_refused"]
    assert report["serve_dir_speculative"] is None
    assert "MLAAttention" in report["stubbed"]
    assert report["parameters_not_loaded"] == []
    assert report["shared_from_verifier"] == ["model.embed_tokens.weight"]
    # vLLM 0.34's own loader decides so too: with no embedding in the export, the
    # verifier's is shared, a quantized one included.
    assert report["embedding_sharing"] == {"plain": "target", "quantized": "target"}
    step = report["one_step"]
    assert step["max_abs_logit_diff"] < 1e-4, step
    assert step["same_argmax"] and step["same_masked_tokens"]


def test_vllm_check_refuses_a_verifier_too_large_for_the_box(
    tiny_draft_checkpoint, monkeypatch, capsys
):
    """Without --synthetic-aux-states the check runs the verifier's decoder in
    float32: a verifier bigger than the memory available is refused in one line
    naming the flag, before any environment is built or tensor read."""
    from speculators_kimi.vllm_check import size

    ckpt = tiny_draft_checkpoint
    verifier = ckpt.parent / "verifier"
    need = size.decoder_size(verifier)
    assert need.bytes == 4 * need.elements > 0
    monkeypatch.setattr(size, "available_bytes", lambda: need.bytes - 1)
    monkeypatch.setattr(
        "speculators_kimi.vllm_check.cli.ensure_env", pytest.fail
    )  # never reached
    argv = [str(ckpt), "--checkpoint", str(ckpt), "--verifier", str(verifier)]
    assert cli.main(["vllm-check", *argv]) == 1
    errors = [s for s in capsys.readouterr().err.splitlines() if s.startswith("error")]
    assert len(errors) == 1 and "rerun with --synthetic-aux-states" in errors[0]
    assert f"{need.elements:,} parameters" in errors[0]
    monkeypatch.setattr(size, "available_bytes", lambda: need.bytes)
    size.check_decoder_fits(verifier)  # exactly fits: no refusal


def test_printed_serve_lines_parse_under_vllm_034(tmp_path):
    """The `vllm serve` lines `export` prints, both layouts and a block drafter's,
    through vLLM 0.34's own `vllm serve` parser
    (tests/support/vllm_serve_lines_probe.py): each
    parses, names the model, and its --speculative-config holds only keys 0.34's
    SpeculativeConfig has. A key 0.34 removed is caught the same way."""
    from speculators_kimi.export.draft import ExportResult
    from speculators_kimi.export.launch import launch_commands
    from speculators_kimi.vllm_check.env import default_env, ensure_env

    out = tmp_path / "serve"
    results = [
        ExportResult(out, HUB_ID, 3, [], layout=layout)
        for layout in ("speculators", "native")
    ]
    # A block drafter: served under its vLLM method (dflash2 under dflash).
    results.append(ExportResult(out, HUB_ID, 4, [], method="dspark"))
    lines = [line for result in results for line in launch_commands(result)]
    removed = '{"model": "x", "method": "eagle3", "disable_padded_drafter_batch": true}'
    lines.append(f"vllm serve {HUB_ID} --speculative-config '{removed}'")
    python = ensure_env(default_env("0.34.0"), "0.34.0")
    probe = SUPPORT / "vllm_serve_lines_probe.py"
    # vLLM's CPU platform; the Hub id stays an id (HF_HUB_OFFLINE would resolve it).
    cpu = {"VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "0"}
    proc = run([str(python), str(probe), json.dumps(lines)], env=cpu, timeout=600)
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["vllm"] == "0.34.0"
    *ours, control = report["lines"]
    assert [r["line"] for r in ours] == lines[:-1] and len(ours) == 5
    serve_dir = [0, 3]  # `vllm serve DIR`: the verifier comes from the export
    for i, parsed in enumerate(ours):
        if i in serve_dir:
            assert parsed["model"] == str(out.resolve())
            assert not parsed["speculative_config"]
            continue
        assert parsed["model"] == HUB_ID and parsed["unknown_keys"] == []
        method, k = ("dspark", 4) if i == 4 else ("eagle3", 3)
        assert parsed["speculative_config"] == {
            "model": str(out.resolve()),
            "method": method,
            "num_speculative_tokens": k,
        }
    assert control["unknown_keys"] == ["disable_padded_drafter_batch"]


def test_an_epoch_table_without_its_pick_is_named(tmp_path, capsys):
    """A KeyError traceback ('best')."""
    from speculators_kimi.cli import main
    from speculators_kimi.evaluate.epochs import EPOCH_TABLE_FORMAT

    table = tmp_path / "table.json"
    table.write_text(json.dumps({"format": EPOCH_TABLE_FORMAT, "epochs": []}))
    assert main(["export", str(table), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert f"{table}: an epoch table without its pick (best.checkpoint)" in err
    table.write_text("{}")  # another JSON file: evaluate's report, say
    assert main(["export", str(table), "--out", str(tmp_path / "o")]) == 1
    assert f"{table} is a file: neither a checkpoint" in capsys.readouterr().err
