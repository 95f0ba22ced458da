"""``speculators-kimi export``: a trained EAGLE-3 checkpoint as vLLM serves it.

``speculators train`` writes a checkpoint that records the verifier by the path
it was trained from and carries the frozen verifier embedding. vLLM 0.33 reads
the speculators format itself, but ``vllm serve DIR`` needs the verifier as a
Hub id (it refuses local paths), reads ``head_dim`` as hidden/heads when it is
absent, and shares the target's embedding when the draft has none. The export
writes a new directory; the checkpoint stays as upstream wrote it:

* ``speculators_config.verifier.name_or_path``: a Hub id (``--verifier-id``, else
  the recorded one if it is an id, else the verifier's own ``_name_or_path`` or
  the Hugging Face cache it sits in);
* ``transformer_layer_config.head_dim``, ``draft_vocab_size``,
  ``target_hidden_size`` and ``eagle_aux_hidden_state_layer_ids`` written out;
* ``embed_tokens.weight`` dropped when it equals the verifier's (always so when
  training froze it), ``t2d`` dropped (vLLM does not read it), ``d2t`` kept.

A draft with DeepSeek-V3 (MLA) layers (``transformer_layer_config.model_type``
``deepseek_v3``, ``speculators train --draft-arch deepseek_v3``) is written in the
native Hugging Face layout instead: vLLM 0.33's speculators parser maps only
llama/qwen3 layers, while its ``Eagle3DeepseekV3ForCausalLM`` loads a plain
DeepSeek MLA ``config.json`` (:func:`_mla_serving_config`, ``model_type``
``deepseek_v2``) passed as ``--speculative-config '{"model": DIR, "method":
"eagle3"}'``; the tensors keep their names and the same tensors are dropped.
vLLM cannot detect such a directory as a draft by itself, so ``vllm serve DIR``
is not a way to serve it.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import CommandError

__all__ = ["ExportResult", "export_draft", "hub_id_of", "launch_commands"]

_CACHE_REPO = re.compile(r"models--([^/]+?)--([^/]+)/snapshots/")
_DROPPED = ("t2d",)
#: The trained draft layer type that vLLM serves with its MLA EAGLE-3 class.
MLA_LAYER_TYPE = "deepseek_v3"
MLA_ARCHITECTURE = "Eagle3DeepseekV3ForCausalLM"
#: The ``model_type`` the native export declares (see :func:`_mla_serving_config`).
MLA_SERVE_MODEL_TYPE = "deepseek_v2"


class ExportError(CommandError):
    """The checkpoint cannot be exported as asked (the message says how to fix)."""


@dataclass
class ExportResult:
    """What :func:`export_draft` wrote."""

    out: Path
    verifier_id: str
    num_speculative_tokens: int
    tensors: list[str]
    dropped: dict[str, str] = field(default_factory=dict)  # name -> why
    #: ``speculators`` (the speculators format) or ``native`` (an HF config for
    #: vLLM's ``Eagle3DeepseekV3ForCausalLM``, MLA drafts).
    layout: str = "speculators"


def _is_hub_id(name: str | None) -> bool:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if not name or Path(name).expanduser().exists() or name.startswith((".", "/")):
        return False
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return "/" in name


def hub_id_of(verifier: str | None) -> str | None:
    """The Hub id a verifier came from: itself if it is one, a Hugging Face cache
    snapshot's repo, or the ``_name_or_path`` its config records."""
    if verifier is None:
        return None
    if _is_hub_id(verifier):
        return verifier
    path = Path(verifier).expanduser()
    cached = _CACHE_REPO.search(str(path.resolve()) + "/")
    if cached:
        return f"{cached.group(1)}/{cached.group(2)}"
    config = path / "config.json"
    if config.is_file():
        recorded = json.loads(config.read_text()).get("_name_or_path")
        if _is_hub_id(recorded):
            return str(recorded)
    return None


def _verifier_embedding(verifier: str, keys: dict[str, Any]) -> Any:
    from speculators.utils.verifier_weights import (
        load_verifier_tensors,
        resolve_verifier_weights,
    )

    spec = resolve_verifier_weights(
        verifier,
        prefix=keys.get("prefix"),
        embed_key=keys.get("embed_key"),
        head_key=keys.get("head_key"),
        norm_key=keys.get("norm_key"),
    )
    return load_verifier_tensors(spec, load_norm=False).embed


def _embedding_is_verifiers(
    config: dict[str, Any], embed: Any, verifier_path: str | None
) -> tuple[bool, str]:
    """Whether the draft's embedding is the verifier's, and how that is known."""
    import torch

    keys = config["speculators_config"]["verifier"].get("weights") or {}
    if verifier_path and Path(verifier_path).is_dir():
        theirs = _verifier_embedding(verifier_path, keys)
        same = theirs is not None and torch.equal(theirs.to(embed.dtype), embed)
        how = f"compared with {verifier_path}"
        return same, how + ("" if same else ": it differs")
    if not config.get("embed_requires_grad", False):
        return True, "frozen in training (embed_requires_grad false)"
    return False, "trained (embed_requires_grad true) and the verifier is not here"


def _aux_layer_ids(config: dict[str, Any]) -> list[int]:
    ids = config.get("eagle_aux_hidden_state_layer_ids")
    if not ids:
        raise ExportError(
            "config.json has no eagle_aux_hidden_state_layer_ids; reload the "
            "checkpoint with SpeculatorModel.from_pretrained and save it again"
        )
    return [int(i) for i in ids]


def _serving_config(config: dict[str, Any], verifier_id: str, hidden: int) -> dict:
    layer = dict(config["transformer_layer_config"])
    if layer.get("head_dim") is None:
        layer["head_dim"] = layer["hidden_size"] // layer["num_attention_heads"]
    out = dict(config)
    out["transformer_layer_config"] = layer
    out["draft_vocab_size"] = int(config.get("draft_vocab_size") or layer["vocab_size"])
    out["target_hidden_size"] = int(config.get("target_hidden_size") or hidden)
    _aux_layer_ids(config)
    spec = dict(config["speculators_config"])
    spec["verifier"] = dict(spec["verifier"], name_or_path=verifier_id)
    out["speculators_config"] = spec
    return out


#: DeepSeek-V3 mixture-of-experts and MTP fields: a draft layer is dense and has no
#: MTP layer, so the class defaults its config carries (256 routed experts, 8
#: groups, ...) describe neither it nor the verifier; not written (a null
#: ``n_routed_experts`` would say "dense", but transformers' DeepseekV2Config,
#: which vLLM parses it with, types it int and refuses null).
_MOE_FIELDS = (
    "first_k_dense_replace",
    "n_routed_experts",
    "moe_intermediate_size",
    "moe_layer_freq",
    "n_group",
    "n_shared_experts",
    "norm_topk_prob",
    "num_experts_per_tok",
    "num_nextn_predict_layers",
    "routed_scaling_factor",
    "scoring_func",
    "topk_group",
    "topk_method",
)
#: Token ids the layer config holds as class defaults: the verifier's own, or none.
_TOKEN_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id")


def _verifier_token_ids(verifier: str | None) -> dict[str, Any]:
    """The verifier's own bos / eos / pad ids (its text config, else its top-level
    config), when a local copy is at hand; else none."""
    if not verifier or not (Path(verifier) / "config.json").is_file():
        return {}
    from speculators.utils.text_config import load_config_dict, text_config_dict

    top = load_config_dict(verifier)
    text = text_config_dict(top)
    return {
        key: text.get(key, top.get(key))
        for key in _TOKEN_FIELDS
        if text.get(key, top.get(key)) is not None
    }


def _mla_serving_config(
    config: dict[str, Any],
    hidden: int,
    has_input_norm: bool,
    verifier: str | None = None,
) -> dict:
    """The native ``config.json`` vLLM 0.33's ``Eagle3DeepseekV3ForCausalLM``
    reads: the trained DeepSeek-V3 layer config (every MLA field: q/kv LoRA ranks,
    nope/rope/v head dims, ``rope_parameters``, ``rope_interleave``), as the
    top-level config with the EAGLE-3 fields beside it.

    ``model_type`` is ``deepseek_v2`` (same MLA fields; vLLM builds both with
    ``DeepseekV2MLAAttention``), the one value vLLM 0.33's eagle3 path takes as
    an MLA draft: its draft ``hf_overrides`` (``SpeculativeConfig.
    hf_config_override``) rewrite every ``deepseek_v3`` draft config into its MTP
    draft (``DeepSeekMTPModel``, which ``EAGLEConfig`` then names the unregistered
    ``Eagle3DeepSeekMTPModel``), and ``kimi_k2`` is not in the list of EAGLE
    drafts it treats as MLA (``use_mla`` false, vllm#45760).
    The aux layer ids go both top level (vLLM's model runner reads them there)
    and in ``eagle_config`` (where ``DeepseekV2Eagle3Model`` counts them). Only
    fields that describe the draft are written: no mixture-of-experts or MTP
    class defaults (vLLM builds a dense ``DeepseekV2MLP`` for the draft layer
    whatever they say), token ids from the verifier (``verifier``, a local copy)
    or none.
    """
    layer = dict(config["transformer_layer_config"])
    if has_input_norm or config.get("norm_before_fc"):
        raise ExportError(
            "the draft was trained with norm_before_fc (an input_norm before fc); "
            f"vLLM's {MLA_ARCHITECTURE} has no input norm before fc, so it would "
            "serve a different function: retrain the draft without --norm-before-fc"
        )
    if not layer.get("rope_interleave", True):
        raise ExportError(
            "the draft's DeepSeek-V3 layer has rope_interleave false; vLLM's MLA "
            "attention applies rotary embeddings interleaved (is_neox_style=False) "
            "only: retrain the draft with rope_interleave true"
        )
    aux = _aux_layer_ids(config)
    for key in ("architectures", "_name_or_path", *_MOE_FIELDS, *_TOKEN_FIELDS):
        layer.pop(key, None)
    layer.update(_verifier_token_ids(verifier))
    out: dict[str, Any] = {
        "architectures": [MLA_ARCHITECTURE],
        "model_type": MLA_SERVE_MODEL_TYPE,
        **{k: v for k, v in layer.items() if k != "model_type"},
    }
    out["vocab_size"] = int(layer["vocab_size"])  # the target's: d2t maps onto it
    out["draft_vocab_size"] = int(config.get("draft_vocab_size") or layer["vocab_size"])
    out["target_hidden_size"] = int(config.get("target_hidden_size") or hidden)
    out["eagle_aux_hidden_state_layer_ids"] = aux
    out["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": aux}
    for key in ("norm_output", "fc_norm", "norm_before_residual"):
        out[key] = bool(config.get(key, False))
    out["tie_word_embeddings"] = bool(config.get("tie_word_embeddings", False))
    if config.get("dtype") or config.get("torch_dtype"):
        out["dtype"] = config.get("dtype") or config.get("torch_dtype")
    return out


def _check_out(out: Path, overwrite: bool) -> None:
    """Refuse an ``out`` that is a file, or a non-empty directory unless
    ``overwrite`` (whose files would otherwise be mixed with the export's)."""
    if out.exists() and not out.is_dir():
        raise ExportError(f"--out {out} is a file, not a directory")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        held = sorted(p.name for p in out.iterdir())
        shown = ", ".join(held[:5]) + (", ..." if len(held) > 5 else "")
        raise ExportError(
            f"--out {out} is not empty ({shown}); choose a new directory, or pass "
            "--overwrite to replace it whole"
        )


def _move_into_place(staging: Path, out: Path) -> None:
    """Rename the finished ``staging`` to ``out``; a previous ``out`` is renamed
    aside first and removed only once the new one is in place."""
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        out.rename(old / out.name)
    try:
        staging.rename(out)
    except OSError:
        if old is not None:
            (old / out.name).rename(out)
        raise
    finally:
        if old is not None and out.exists():
            shutil.rmtree(old, ignore_errors=True)


def export_draft(
    checkpoint: str | Path,
    out: str | Path,
    *,
    verifier_id: str | None = None,
    keep_embeddings: bool = False,
    verifier: str | None = None,
    overwrite: bool = False,
) -> ExportResult:
    """Write ``out``: ``checkpoint`` in the form vLLM serves (``vllm serve out``
    for Llama-style layers; ``--speculative-config`` for MLA layers).

    The export is written to a staging directory beside ``out`` and renamed into
    place, so ``out`` is either the previous directory or the whole new export,
    never a mix or a torn file.

    :param verifier: a local copy of the verifier to compare the embedding with
        (default: the path recorded in the checkpoint, when it exists).
    :param overwrite: replace an existing non-empty ``out`` whole.
    :raises ExportError: no Hub id for the verifier, ``out`` is the checkpoint or
        a non-empty directory (without ``overwrite``), or an MLA draft vLLM
        cannot serve as trained (``norm_before_fc``).
    """
    from safetensors.torch import load_file, save_file

    checkpoint, out = Path(checkpoint), Path(out)
    config_file = checkpoint / "config.json"
    if not config_file.is_file():
        raise ExportError(f"{checkpoint}: no config.json; is it a checkpoint?")
    if out.resolve() == checkpoint.resolve():
        raise ExportError("--out must differ from the checkpoint (it stays as is)")
    _check_out(out, overwrite)
    config = json.loads(config_file.read_text())
    if config.get("speculators_model_type") != "eagle3":
        raise ExportError(
            f"{config_file}: speculators_model_type "
            f"{config.get('speculators_model_type')!r}; export handles eagle3"
        )
    recorded = config["speculators_config"]["verifier"].get("name_or_path")
    local = verifier or recorded
    hub_id = verifier_id or hub_id_of(recorded) or hub_id_of(local)
    if hub_id is None:
        raise ExportError(
            f"the draft's verifier is {recorded!r}, not a Hugging Face Hub id, and "
            "no id was found for it (no Hub cache origin, no _name_or_path in its "
            "config.json); vLLM needs one: pass --verifier-id ORG/NAME, the repo "
            "the verifier was downloaded from"
        )
    if not _is_hub_id(hub_id):
        raise ExportError(
            f"--verifier-id {hub_id!r} is not a Hub id of the form ORG/NAME (or it "
            "names an existing local path, which vLLM refuses)"
        )
    tensors = load_file(str(checkpoint / "model.safetensors"))
    text_hidden = int(config["transformer_layer_config"]["hidden_size"])
    mla = config["transformer_layer_config"].get("model_type") == MLA_LAYER_TYPE
    if mla:
        serving = _mla_serving_config(
            config, text_hidden, "input_norm.weight" in tensors, local
        )
    else:
        serving = _serving_config(config, hub_id, text_hidden)
    dropped: dict[str, str] = {}
    for name in _DROPPED:
        if tensors.pop(name, None) is not None:
            dropped[name] = "not read by vLLM"
    if "embed_tokens.weight" in tensors and not keep_embeddings:
        same, how = _embedding_is_verifiers(
            config, tensors["embed_tokens.weight"], local
        )
        if same:
            del tensors["embed_tokens.weight"]
            dropped["embed_tokens.weight"] = f"the verifier's ({how}); vLLM shares it"
    # config.py is the speculators config class: the native layout has no use for it.
    extras = (
        ("generation_config.json",) if mla else ("config.py", "generation_config.json")
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.staging-", dir=out.parent))
    try:
        save_file(
            tensors, str(staging / "model.safetensors"), metadata={"format": "pt"}
        )
        (staging / "config.json").write_text(json.dumps(serving, indent=2) + "\n")
        for extra in extras:
            if (checkpoint / extra).is_file():
                shutil.copy2(checkpoint / extra, staging / extra)
        _move_into_place(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    methods = config["speculators_config"]["proposal_methods"]
    k = int(methods[0]["speculative_tokens"])
    layout = "native" if mla else "speculators"
    return ExportResult(out, hub_id, k, sorted(tensors), dropped, layout)


def launch_commands(result: ExportResult) -> list[str]:
    """The ways to serve the export with vLLM: two for the speculators layout,
    one (``--speculative-config``) for the native MLA layout."""
    spec = json.dumps(
        {
            "model": str(result.out.resolve()),
            "method": "eagle3",
            "num_speculative_tokens": result.num_speculative_tokens,
        }
    )
    with_config = (
        f"vllm serve {shlex.quote(result.verifier_id)} --speculative-config "
        f"{shlex.quote(spec)}"
    )
    if result.layout == "native":
        return [with_config]
    return [f"vllm serve {shlex.quote(str(result.out.resolve()))}", with_config]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``export`` options."""
    parser.add_argument("checkpoint", help="a checkpoint of `speculators train`")
    parser.add_argument("--out", required=True, help="directory to write")
    parser.add_argument(
        "--verifier-id",
        default=None,
        help="the verifier's Hugging Face Hub id (default: found from the checkpoint)",
    )
    parser.add_argument(
        "--verifier",
        default=None,
        help="local verifier directory to compare the embedding with (default: "
        "the recorded path, when it exists)",
    )
    parser.add_argument(
        "--keep-embeddings",
        action="store_true",
        help="ship the draft's embedding even when it equals the verifier's",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a non-empty --out whole (by default it is refused)",
    )


def run(args: argparse.Namespace) -> int:
    """Run ``export`` from parsed arguments."""
    result = export_draft(
        args.checkpoint,
        args.out,
        verifier_id=args.verifier_id,
        keep_embeddings=args.keep_embeddings,
        verifier=args.verifier,
        overwrite=args.overwrite,
    )
    print(f"exported {args.checkpoint} -> {result.out} (verifier {result.verifier_id})")
    for name, why in result.dropped.items():
        print(f"  dropped {name}: {why}")
    if result.layout == "native":
        print(
            f"an MLA draft, written for vLLM's {MLA_ARCHITECTURE} (native layout); "
            "vLLM cannot detect it as a draft from `vllm serve DIR`, so serve the "
            "verifier with it as the speculative model:"
        )
    else:
        print("serve it with either:")
    for command in launch_commands(result):
        print(f"  {command}")
    return 0
