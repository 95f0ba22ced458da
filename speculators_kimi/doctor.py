"""`speculators-kimi doctor <verifier>`: check a verifier before training on it.

Reads only ``config.json``, the weight map and safetensors headers (no tensor
data unless ``--check-values``, no checkpoint code unless ``--trust-remote-code``)
and reports what training would use: the resolved text config and where it was
found, the decoder prefix and the exact embedding / head / final-norm keys with
shapes, dtypes and shards, whether the head is tied, any quantization, the
default EAGLE-3 target layer ids, the draft config training would build, an
estimate of training memory, and every problem with its fix. Exits non-zero when
there is a problem.

``--check-values`` also reads the tensors the draft takes from the verifier (input
embedding, output head unless tied, final norm; a norm bias or FP8 head scale too),
one at a time in 16 MiB chunks read with ``safetensors``, and reports NaN/inf in any
of them as a problem (for a Hub id this downloads the shards that hold them, as
training would).

The logic lives in the patched ``speculators`` package (units 0003 and 0005-0009):
``speculators.utils.text_config`` and ``speculators.utils.verifier_weights``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .cli_args import (
    add_json_argument,
    add_verifier_weight_arguments,
    emit_report,
    verifier_weight_kwargs,
)

DEFAULT_DRAFT_VOCAB = 32000
DEFAULT_SEQ_LEN = 8192
DEFAULT_TTT_STEPS = 3
FP32 = 4
ADAM_STATE_BYTES = 8
# --check-values reads a tensor in chunks of this many stored bytes.
VALUE_CHUNK_BYTES = 16 << 20


@dataclass
class Problem:
    """Something that stops training (or makes it wrong), and how to fix it."""

    what: str
    fix: str

    def to_dict(self) -> dict[str, str]:
        return {"problem": self.what, "fix": self.fix}


@dataclass
class Report:
    verifier: str
    text_config: dict[str, Any] | None = None
    weights: dict[str, Any] | None = None
    quantization: list[str] = field(default_factory=list)
    target_layer_ids: list[int] | None = None
    draft_config: dict[str, Any] | None = None
    memory: dict[str, Any] | None = None
    # Per tensor NaN/inf counts; None when --check-values was not given.
    values: list[dict[str, Any]] | None = None
    # Every shard the weight map names: {shard, tensors, ok}; None for a Hub id.
    shards: list[dict[str, Any]] | None = None
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "verifier": self.verifier,
            "ok": self.ok,
            "text_config": self.text_config,
            "weights": self.weights,
            "quantization": self.quantization,
            "target_layer_ids": self.target_layer_ids,
            "draft_config": self.draft_config,
            "estimated_memory": self.memory,
            "value_check": self.values,
            "shards": self.shards,
            "problems": [p.to_dict() for p in self.problems],
        }


def _find_path(node: Any, target: Any, prefix: str = "") -> str | None:
    """Dotted path of ``target`` (by identity) inside a nested config dict."""
    if node is target:
        return prefix or "(top level)"
    if isinstance(node, dict):
        for key, child in node.items():
            found = _find_path(child, target, f"{prefix}.{key}" if prefix else key)
            if found is not None:
                return found
    return None


TEXT_FIELDS = (
    "model_type",
    "hidden_size",
    "vocab_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "tie_word_embeddings",
    "kv_lora_rank",
    "v_head_dim",
    "num_nextn_predict_layers",
)
DRAFT_FIELDS = (
    "model_type",
    "hidden_size",
    "vocab_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "hidden_act",
    "rms_norm_eps",
    "max_position_embeddings",
)


def _text_config_section(verifier: str, trust_remote_code: bool, report: Report) -> Any:
    from speculators.utils.text_config import (
        load_config_dict,
        load_text_config,
        text_config_dict,
        ties_word_embeddings,
    )

    config_dict = load_config_dict(verifier)
    text_dict = text_config_dict(config_dict)
    text_config = load_text_config(verifier, trust_remote_code=trust_remote_code)
    section = {name: getattr(text_config, name, None) for name in TEXT_FIELDS}
    section["found_at"] = _find_path(config_dict, text_dict)
    section["config_file"] = str(
        Path(verifier) / "config.json" if Path(verifier).is_dir() else verifier
    )
    section["tie_word_embeddings"] = ties_word_embeddings(config_dict)
    report.text_config = section
    for where, node in (("text config", text_dict), ("config", config_dict)):
        quant = node.get("quantization_config") if isinstance(node, dict) else None
        if quant:
            method = quant.get("quant_method", "?")
            fmt = quant.get("format") or quant.get("fmt") or ""
            report.quantization.append(f"{where}: {method} {fmt}".strip())
    return text_config


def _weights_section(verifier: str, text_config: Any, report: Report, args) -> Any:
    from speculators.utils.verifier_weights import resolve_verifier_weights

    spec = resolve_verifier_weights(
        verifier, text_config=text_config, **verifier_weight_kwargs(args)
    )
    report.weights = json.loads(json.dumps(dataclasses.asdict(spec)))
    # The flags that pin this resolution (train and generate-hidden-states).
    report.weights["overrides"] = {
        "verifier_weight_prefix": spec.prefix,
        "verifier_embed_key": spec.embed.key,
        "verifier_head_key": spec.head.key,
        "verifier_norm_key": spec.norm.key if spec.norm else None,
    }
    if spec.quantization:
        report.quantization.append(f"output head: {spec.quantization}")
    return spec


def _shards_section(verifier: str, report: Report) -> None:
    """Each shard a local checkpoint's weight map names exists and is as long as
    its header says (:mod:`.verifier.shards`, the check the commands that load
    the verifier make; no tensor is read).

    The embedding, head and norm shards are read by the weights section; a
    missing or torn layer shard would otherwise only fail the next command."""
    from speculators.utils.verifier_weights.files import is_local

    from .verifier.shards import check_shards

    if not is_local(verifier):
        return
    checks = check_shards(verifier)
    report.shards = []
    for check in checks:
        report.shards.append(
            {"shard": check.shard, "tensors": len(check.keys), "ok": check.ok}
        )
        if not check.ok:
            report.problems.append(
                Problem(
                    f"{check.problem()}.",
                    "Re-download the checkpoint (or this shard) and run doctor again.",
                )
            )


def _value_targets(spec: Any) -> list[tuple[str, Any]]:
    """``(role, TensorInfo)`` of every verifier tensor the draft reads, once each."""
    tied = spec.head.key == spec.embed.key and spec.head.shard == spec.embed.shard
    targets = [("embedding (tied head)" if tied else "embedding", spec.embed)]
    if not tied:
        targets.append(("output head", spec.head))
    for role, info in (
        ("output head scale", spec.head_scale),
        ("final norm", spec.norm),
        ("final norm bias", spec.norm_bias),
    ):
        if info is not None:
            targets.append((role, info))
    return targets


def count_nonfinite(
    path: str | Path, key: str, chunk_bytes: int = VALUE_CHUNK_BYTES
) -> tuple[int, int]:
    """NaN and inf counts of the tensor ``key`` of a safetensors file.

    Reads ``safetensors``' slices of about ``chunk_bytes`` (whole rows) one at a
    time, so a Kimi-K2.5 embedding (163840 x 7168 bf16, 2.3 GB) never needs more
    than one chunk of anonymous memory.

    :param path: the ``.safetensors`` file.
    :param key: the tensor's key.
    :param chunk_bytes: about how many bytes to read per chunk.
    :returns: ``(nan, inf)``; both 0 for a tensor that is not floating point.
    """
    import torch
    from safetensors import safe_open

    nan = inf = 0
    with safe_open(str(path), framework="pt", device="cpu") as handle:
        piece = handle.get_slice(key)
        shape = [int(dim) for dim in piece.get_shape()]
        if 0 in shape:
            return 0, 0
        if not shape:
            chunks: Any = [handle.get_tensor(key)]
        else:
            row_bytes = 8 * math.prod(shape[1:])  # an upper bound per element
            rows = max(1, chunk_bytes // row_bytes)
            chunks = (piece[first : first + rows] for first in range(0, shape[0], rows))
        for chunk in chunks:
            if not chunk.is_floating_point():
                return 0, 0
            if chunk.element_size() == 1:  # FP8: no isnan/isinf kernels
                chunk = chunk.float()
            # A max propagates NaN and inf: one cheap reduction clears a clean
            # chunk (about 8x faster than isnan + isinf on bf16 here).
            if torch.isfinite(chunk.abs().amax()):
                continue
            nan += int(torch.isnan(chunk).sum())
            inf += int(torch.isinf(chunk).sum())
    return nan, inf


def _values_section(spec: Any, report: Report, progress: Any = None) -> None:
    """Count NaN/inf in each tensor of :func:`_value_targets`; non-finite is a
    problem. ``progress`` (a text stream) gets a line per tensor."""
    import time

    from speculators.utils.verifier_weights import resolve_checkpoint_file

    report.values = []
    for role, info in _value_targets(spec):
        record: dict[str, Any] = {
            "role": role,
            "key": info.key,
            "file": info.shard,
            "shape": list(info.shape),
            "dtype": info.dtype,
        }
        report.values.append(record)
        if progress is not None:
            print(
                f"checking values: {role} {info.key} {list(info.shape)} "
                f"{info.dtype} [{info.shard}] ...",
                file=progress,
                flush=True,
            )
        started = time.monotonic()
        try:
            nan, inf = count_nonfinite(
                resolve_checkpoint_file(spec.source, info.shard), info.key
            )
        except Exception as err:
            record.update(nan=None, inf=None, finite=None, error=str(err))
            report.problems.append(
                Problem(
                    f"Cannot read the values of '{info.key}' ({info.shard}): "
                    f"{type(err).__name__}: {err}",
                    "Re-download the checkpoint (the shard is missing or damaged; "
                    "for a Hub id offline, it must be in the Hugging Face cache).",
                )
            )
            continue
        record.update(
            nan=nan,
            inf=inf,
            finite=not (nan or inf),
            seconds=round(time.monotonic() - started, 3),
        )
        if nan or inf:
            report.problems.append(
                Problem(
                    f"Verifier {role} '{info.key}' ({info.shard}) holds {nan} NaN "
                    f"and {inf} inf value(s); training rejects it.",
                    "The verifier checkpoint holds non-finite values in "
                    f"{info.key} ({info.shard}); re-download or re-export it.",
                )
            )


def _draft_section(verifier: str, args, report: Report) -> Any:
    from speculators.models.eagle3.model_definitions import MLA_FIELDS
    from speculators.models.utils import resolve_target_layer_ids
    from speculators.train.cli import (
        create_transformer_layer_config,
    )

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            report.target_layer_ids = resolve_target_layer_ids(
                None, verifier, trust_remote_code=args.trust_remote_code
            )
        except ValueError as err:
            report.problems.append(
                Problem(str(err), "Pass --target-layer-ids to training explicitly.")
            )
        draft = create_transformer_layer_config(
            verifier_name_or_path=verifier,
            num_layers=args.num_layers,
            draft_arch=args.draft_arch,
            hidden_act=None,
            sliding_window=4096,
            full_attention_indices=list(range(args.num_layers)),
            trust_remote_code=args.trust_remote_code,
        )
    # An MLA (``--draft-arch deepseek_v3``) draft shows its latent geometry too.
    mla = (*MLA_FIELDS, "rope_interleave", "rope_parameters")
    fields = DRAFT_FIELDS + (mla if args.draft_arch == "deepseek_v3" else ())
    report.draft_config = {name: getattr(draft, name, None) for name in fields}
    report.draft_config["draft_vocab_size"] = args.draft_vocab_size
    return draft


def draft_options(verifier: str, args: argparse.Namespace) -> dict[str, Any]:
    """The draft's norm and embedding options as ``speculators train`` resolves
    them from the same flags (its own defaults, e.g. no ``--norm-before-fc`` for
    an MLA draft)."""
    from speculators.train.config import TrainConfig

    argv = ["--verifier-name-or-path", verifier, "--data-path", "unused"]
    argv += ["--draft-arch", args.draft_arch, "--num-layers", str(args.num_layers)]
    for flag in ("norm_before_fc", "norm_output"):
        value = getattr(args, flag, None)
        if value is not None:
            argv.append(f"--{'' if value else 'no-'}{flag.replace('_', '-')}")
    if getattr(args, "fc_norm", False):
        argv.append("--fc-norm")
    draft = TrainConfig.resolve(argv).draft
    return {
        name: getattr(draft, name)
        for name in (
            "norm_before_residual",
            "norm_before_fc",
            "fc_norm",
            "norm_output",
            "embed_requires_grad",
        )
    }


def draft_params(
    draft: Any, *, draft_vocab: int, num_aux: int, options: dict[str, Any]
) -> tuple[int, int]:
    """(trainable, frozen) parameters of the whole EAGLE-3 draft ``speculators
    train`` builds for ``draft`` and ``options``, counted on the meta device (its
    own classes: layers, ``fc``, norms, embedding and heads; no tensor read)."""
    import torch
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig

    config = Eagle3SpeculatorConfig(
        transformer_layer_config=draft,
        draft_vocab_size=draft_vocab,
        eagle_aux_hidden_state_layer_ids=list(range(num_aux)),
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=1)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(name_or_path=None, architectures=[]),
        ),
        **options,
    )
    with torch.device("meta"):
        model = Eagle3DraftModel(config)
    counts = [0, 0]
    for param in model.parameters():
        counts[not param.requires_grad] += param.numel()
    return counts[0], counts[1]


def _attention_width(draft: Any) -> int:
    """Activations per token of one attention layer (q, k, v, output), floats."""
    heads = int(draft.num_attention_heads)
    if getattr(draft, "kv_lora_rank", None):  # MLA: latents, then expanded heads
        qk = int(draft.qk_nope_head_dim) + int(draft.qk_rope_head_dim)
        v = int(draft.v_head_dim)
        latents = int(draft.q_lora_rank or 0) + int(draft.kv_lora_rank) + qk
        return latents + heads * (2 * qk + 2 * v)
    hidden = int(draft.hidden_size)
    head_dim = int(getattr(draft, "head_dim", None) or hidden // heads)
    return (2 * heads + 2 * int(draft.num_key_value_heads)) * head_dim


def estimate_memory(
    draft: Any,
    *,
    draft_vocab: int,
    options: dict[str, Any],
    seq_len: int = DEFAULT_SEQ_LEN,
    ttt_steps: int = DEFAULT_TTT_STEPS,
    num_aux: int = 3,
) -> dict[str, Any]:
    """Rough EAGLE-3 training memory (fp32 weights, AdamW), in GiB.

    :param draft: the draft decoder config.
    :param draft_vocab: the draft vocabulary size.
    :param options: the draft's norm options (:func:`draft_options`).
    :param seq_len: tokens per step (one packed sequence).
    :param ttt_steps: test-time-training steps.
    :param num_aux: auxiliary hidden states fed to the draft.
    :returns: the parts and the total.
    """
    hidden = int(draft.hidden_size)
    inter = int(draft.intermediate_size)
    layers = int(draft.num_hidden_layers)
    # The whole draft, counted exactly from its own classes (on the meta device).
    trainable, frozen = draft_params(
        draft, draft_vocab=draft_vocab, num_aux=num_aux, options=options
    )
    gib = 1024**3
    weights = (trainable + frozen) * FP32
    optimizer = trainable * (FP32 + ADAM_STATE_BYTES)
    inputs = seq_len * (num_aux + 1) * hidden * 2
    logits = ttt_steps * seq_len * draft_vocab * FP32 * 3
    per_token = 4 * hidden + _attention_width(draft) + 2 * inter
    activations = ttt_steps * layers * seq_len * per_token * FP32
    total = weights + optimizer + inputs + logits + activations
    return {
        "assumptions": (
            f"fp32 weights + AdamW, seq_len={seq_len}, ttt_steps={ttt_steps}, "
            f"draft_vocab={draft_vocab}, {layers} draft layer(s); rough"
        ),
        "trainable_params": trainable,
        "frozen_params": frozen,
        "weights_gib": round(weights / gib, 2),
        "grads_and_optimizer_gib": round(optimizer / gib, 2),
        "activations_and_logits_gib": round((inputs + logits + activations) / gib, 2),
        "total_gib": round(total / gib, 2),
    }


def _problem_for(err: Exception) -> Problem:
    from speculators.utils.text_config import (
        AmbiguousTextConfigError,
    )
    from speculators.utils.verifier_weights import (
        VerifierWeightsError,
    )

    text = str(err)
    if isinstance(err, AmbiguousTextConfigError):
        return Problem(text, "Pick the text sub-config (see the candidates above).")
    if isinstance(err, VerifierWeightsError):
        fix = (
            "Follow the message: pass --verifier-weight-prefix / "
            "--verifier-embed-key / --verifier-head-key / --verifier-norm-key, or "
            "repair/re-download the checkpoint."
        )
        if "packed" in text or "quantized" in text:
            fix = "Use an unquantized or FP8 block-scaled checkpoint of the model."
        elif "missing" in text or "Corrupt" in text or "Truncated" in text:
            fix = "Re-download the checkpoint (a shard is missing or damaged)."
        return Problem(text, fix)
    if isinstance(err, FileNotFoundError | OSError):
        return Problem(
            f"Cannot read the verifier: {text}",
            "Check the path / Hub id and that config.json and weights are present.",
        )
    return Problem(f"{type(err).__name__}: {text}", "See the message.")


def diagnose(verifier: str, args: argparse.Namespace) -> Report:
    """Run every check; never raises for a bad verifier (problems are reported)."""
    from speculators.utils.cli_errors import check_model_source

    report = Report(verifier=verifier)
    try:
        check_model_source(verifier, "verifier")
    except ValueError as err:
        report.problems.append(
            Problem(str(err), "Give an existing checkpoint directory or a Hub id.")
        )
        return report
    try:
        text_config = _text_config_section(verifier, args.trust_remote_code, report)
    except Exception as err:
        report.problems.append(_problem_for(err))
        return report
    if args.draft_vocab_size is None:
        args.draft_vocab_size = min(DEFAULT_DRAFT_VOCAB, int(text_config.vocab_size))
    try:
        _shards_section(verifier, report)
    except Exception as err:
        report.problems.append(_problem_for(err))
    bad_shards = [r["shard"] for r in report.shards or [] if not r["ok"]]
    spec = None
    try:
        spec = _weights_section(verifier, text_config, report, args)
    except Exception as err:
        # A shard reported above is not reported twice.
        if not any(shard in str(err) for shard in bad_shards):
            report.problems.append(_problem_for(err))
    if getattr(args, "check_values", False) and spec is not None:
        _values_section(spec, report, progress=sys.stderr)
    try:
        draft = _draft_section(verifier, args, report)
        options = draft_options(verifier, args)
        report.draft_config = {**(report.draft_config or {}), **options}
        report.memory = estimate_memory(
            draft,
            draft_vocab=args.draft_vocab_size,
            options=options,
            num_aux=len(report.target_layer_ids or [0, 1, 2]),
        )
        if int(draft.hidden_size) != int(text_config.hidden_size):
            report.problems.append(
                Problem(
                    "Draft hidden_size differs from the verifier's.",
                    "Use a draft config with the verifier's hidden_size.",
                )
            )
    except Exception as err:
        report.problems.append(_problem_for(err))
    if args.draft_vocab_size > int(text_config.vocab_size):
        report.problems.append(
            Problem(
                f"--draft-vocab-size {args.draft_vocab_size} exceeds the verifier "
                f"vocabulary ({text_config.vocab_size}).",
                "Choose a draft vocabulary no larger than the verifier's.",
            )
        )
    return report


def _shape(info: dict[str, Any] | None) -> str:
    if not info:
        return "-"
    return f"{info['key']}  {info['shape']} {info['dtype']}  [{info['shard']}]"


def render(report: Report) -> str:
    lines = [f"verifier: {report.verifier}"]
    text = report.text_config
    if text:
        lines.append(
            f"text config: {text['model_type']} at '{text['found_at']}' of "
            f"{text['config_file']}"
        )
        lines.append(
            "  hidden_size={hidden_size} vocab_size={vocab_size} "
            "num_hidden_layers={num_hidden_layers} heads={num_attention_heads}/"
            "{num_key_value_heads}".format(**text)
        )
    weights = report.weights
    if weights:
        lines.append(f"decoder prefix: '{weights['prefix']}'")
        lines.append(f"  embedding:  {_shape(weights['embed'])}")
        head = _shape(weights["head"]) + ("  (tied)" if weights["tied"] else "")
        lines.append(f"  head:       {head}")
        lines.append(
            f"  final norm: {_shape(weights['norm'])}  ({weights['norm_kind']}, "
            f"eps={weights['norm_eps']})"
        )
        lines.append(f"  shards read: {', '.join(weights['shards'])}")
        lines.append(f"tied head: {'yes' if weights['tied'] else 'no'}")
    lines.append(f"quantization: {'; '.join(report.quantization) or 'none seen'}")
    if report.target_layer_ids is not None:
        lines.append(f"default target layer ids: {report.target_layer_ids}")
    if report.draft_config:
        draft = " ".join(f"{k}={v}" for k, v in report.draft_config.items())
        lines.append(f"draft config: {draft}")
    if report.memory:
        mem = report.memory
        lines.append(
            f"estimated training memory: {mem['total_gib']} GiB (weights "
            f"{mem['weights_gib']}, grads+optimizer "
            f"{mem['grads_and_optimizer_gib']}, activations+logits "
            f"{mem['activations_and_logits_gib']}; {mem['assumptions']})"
        )
    if report.values is not None:
        lines.append("tensor values (NaN/inf):")
        for record in report.values:
            if record["finite"] is None:
                state = "unreadable"
            elif record["finite"]:
                state = "all finite"
            else:
                state = f"{record['nan']} NaN, {record['inf']} inf"
            lines.append(
                f"  {record['role']}: {record['key']}  [{record['file']}]  {state}"
            )
    if report.shards is not None:
        bad = [r["shard"] for r in report.shards if not r["ok"]]
        lines.append(
            f"shards: {len(report.shards) - len(bad)} of {len(report.shards)} "
            "present and whole" + (f" (not: {', '.join(bad)})" if bad else "")
        )
    if report.problems:
        lines.append(f"PROBLEMS ({len(report.problems)}):")
        for problem in report.problems:
            lines.append(f"  - {problem.what}")
            lines.append(f"    fix: {problem.fix}")
    else:
        lines.append("no problems found")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("verifier", help="local checkpoint directory or Hub id")
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="load the config with the checkpoint's code (default: read as data)",
    )
    add_json_argument(parser)
    parser.add_argument(
        "--check-values",
        action="store_true",
        help="also read the embedding, head and final norm (one at a time, in "
        "chunks) and report NaN/inf in them (default: read no tensor data)",
    )
    parser.add_argument(
        "--draft-vocab-size",
        type=int,
        default=None,
        help=f"draft vocabulary for the estimate (default: min({DEFAULT_DRAFT_VOCAB}, "
        "verifier vocabulary))",
    )
    parser.add_argument("--num-layers", type=int, default=1)
    parser.add_argument(
        "--norm-before-fc",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="as for `speculators train` (default: its default for --draft-arch)",
    )
    parser.add_argument(
        "--norm-output",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="as for `speculators train` (default: its default)",
    )
    parser.add_argument(
        "--fc-norm", action="store_true", help="as for `speculators train`"
    )
    parser.add_argument(
        "--draft-arch",
        choices=("llama", "qwen3", "deepseek_v3"),
        default="llama",
        help="draft decoder layers to show and estimate (deepseek_v3: MLA with the "
        "verifier's latent attention geometry)",
    )
    add_verifier_weight_arguments(parser)


def run(args: argparse.Namespace) -> int:
    report = diagnose(args.verifier, args)
    emit_report(report.to_dict(), render(report), args)
    return 0 if report.ok else 1
