"""What ``doctor`` found about a verifier: :class:`Report`, its :class:`Problem`
entries, and the report as text (:func:`render`) or JSON (:meth:`Report.to_dict`).

The sections of :mod:`.diagnose` fill a :class:`Report`; nothing here reads the
checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["DECODER_FIELDS", "Problem", "Report", "render"]

#: The decoder geometry both the verifier's and the draft's sections show.
DECODER_FIELDS = (
    "model_type",
    "hidden_size",
    "vocab_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
)


@dataclass
class Problem:
    """Something that stops training (or makes it wrong), and how to fix it."""

    what: str
    fix: str

    def to_dict(self) -> dict[str, str]:
        return {"problem": self.what, "fix": self.fix}


@dataclass
class Report:
    """Every section's findings; a section that did not run stays ``None``."""

    verifier: str
    text_config: dict[str, Any] | None = None
    weights: dict[str, Any] | None = None
    quantization: list[str] = field(default_factory=list)
    target_layer_ids: list[int] | None = None
    #: The algorithm, the flags given after ``--`` and train's notes on them.
    training: dict[str, Any] | None = None
    draft_config: dict[str, Any] | None = None
    #: How vLLM 0.34 serves the draft (None: not planned, or a problem says why).
    serving: dict[str, Any] | None = None
    #: The data a ``--data-path`` after ``--`` names, as training checked it.
    data: dict[str, Any] | None = None
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
            "training": self.training,
            "draft_config": self.draft_config,
            "serving": self.serving,
            "data": self.data,
            "estimated_memory": self.memory,
            "value_check": self.values,
            "shards": self.shards,
            "problems": [p.to_dict() for p in self.problems],
        }


def _shape(info: dict[str, Any] | None) -> str:
    if not info:
        return "-"
    return f"{info['key']}  {info['shape']} {info['dtype']}  [{info['shard']}]"


def _checkpoint_lines(report: Report) -> list[str]:
    """The text config and the weight keys training would use."""
    lines = []
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
        if text.get("hybrid"):
            lines.append(
                "  hybrid: linear-attention or Mamba layers beside attention; "
                "evaluate rolls their recurrent state back after a rejected draft "
                "token"
            )
        if text.get("logit_transform"):
            lines.append(
                f"  logits after the head: {text['logit_transform']}; the draft's "
                "targets and evaluate apply it"
            )
        if text.get("vllm_aux_states"):
            lines.append(f"  vLLM serving: {text['vllm_aux_states']}")
    weights = report.weights
    if weights:
        lines.append(f"decoder prefix: '{weights['prefix']}'")
        lines.append(f"  embedding:  {_shape(weights['embed'])}")
        head = _shape(weights["head"]) + ("  (tied)" if weights["tied"] else "")
        lines.append(f"  head:       {head}")
        if weights.get("head_bias"):
            lines.append(f"  head bias:  {_shape(weights['head_bias'])}")
        lines.append(
            f"  final norm: {_shape(weights['norm'])}  ({weights['norm_kind']}, "
            f"eps={weights['norm_eps']})"
        )
        lines.append(f"  shards read: {', '.join(weights['shards'])}")
        lines.append(f"tied head: {'yes' if weights['tied'] else 'no'}")
    return lines


def _memory_line(mem: dict[str, Any]) -> str:
    return (
        f"estimated training memory: {mem['total_gib']} GiB (weights "
        f"{mem['weights_gib']}, grads+optimizer "
        f"{mem['grads_and_optimizer_gib']}, activations+logits "
        f"{mem['activations_and_logits_gib']}; {mem['assumptions']})"
    )


def _training_lines(training: dict[str, Any]) -> list[str]:
    flags = " ".join(training["train_flags"])
    lines = [
        f"training: --speculator-type {training['speculator_type']}"
        + (f" {flags}" if flags else "")
    ]
    lines.extend(f"  note: {note}" for note in training["notes"])
    return lines


def _serving_line(serving: dict[str, Any]) -> str:
    how = serving["architecture"] or f"the {serving['layout']} layout"
    line = (
        f"vLLM 0.34 serves it: method {serving['method']}, {how}, "
        f"num_speculative_tokens {serving['num_speculative_tokens']}"
    )
    if serving["causal_layers"] is not None:
        kinds = ["causal" if c else "bidirectional" for c in serving["causal_layers"]]
        line += f"; layers in the block: {', '.join(kinds)}"
    return line


def _data_line(data: dict[str, Any]) -> str:
    states = (
        "some hidden states to ask of the vLLM endpoint"
        if data["asks_vllm_for_states"]
        else "every hidden-state file present and of this verifier"
    )
    return (
        f"data: {data['data_path']} as training checks it: {states} "
        f"(aux layers {data['aux_layers']})"
    )


def _value_lines(values: list[dict[str, Any]]) -> list[str]:
    """One line per tensor ``--check-values`` read."""
    lines = ["tensor values (NaN/inf):"]
    for record in values:
        if record["finite"] is None:
            state = "unreadable"
        elif record["finite"]:
            state = "all finite"
        else:
            state = f"{record['nan']} NaN, {record['inf']} inf"
        where = f"{record['key']}  [{record['file']}]"
        lines.append(f"  {record['role']}: {where}  {state}")
    return lines


def _shards_line(shards: list[dict[str, Any]]) -> str:
    bad = [r["shard"] for r in shards if not r["ok"]]
    return f"shards: {len(shards) - len(bad)} of {len(shards)} present and whole" + (
        f" (not: {', '.join(bad)})" if bad else ""
    )


def _problem_lines(problems: list[Problem]) -> list[str]:
    if not problems:
        return ["no problems found"]
    lines = [f"PROBLEMS ({len(problems)}):"]
    for problem in problems:
        lines.append(f"  - {problem.what}")
        lines.append(f"    fix: {problem.fix}")
    return lines


def render(report: Report) -> str:
    """The report as the text ``doctor`` prints without ``--json``."""
    lines = [f"verifier: {report.verifier}", *_checkpoint_lines(report)]
    lines.append(f"quantization: {'; '.join(report.quantization) or 'none seen'}")
    if report.target_layer_ids is not None:
        lines.append(f"target layer ids: {report.target_layer_ids}")
    if report.training:
        lines.extend(_training_lines(report.training))
    if report.draft_config:
        draft = " ".join(f"{k}={v}" for k, v in report.draft_config.items())
        lines.append(f"draft config: {draft}")
    if report.memory:
        lines.append(_memory_line(report.memory))
    if report.serving:
        lines.append(_serving_line(report.serving))
    if report.data:
        lines.append(_data_line(report.data))
    if report.values is not None:
        lines.extend(_value_lines(report.values))
    if report.shards is not None:
        lines.append(_shards_line(report.shards))
    lines.extend(_problem_lines(report.problems))
    return "\n".join(lines)
