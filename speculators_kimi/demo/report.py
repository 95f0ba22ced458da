"""The demo's report as the text it prints (``--json`` prints the dict itself)."""

from __future__ import annotations

from typing import Any

__all__ = ["format_report"]


def _num(x: Any) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def _acceptance_lines(al: dict[str, Any]) -> list[str]:
    """Acceptance length of the trained and untrained drafts, side by side."""
    if not al:
        return []
    lines = []
    for name, label in (
        ("trained", "trained, greedy"),
        ("untrained", "untrained, greedy"),
        ("trained_t1", "trained, T=1"),
    ):
        r = al.get(name)
        if not r:
            continue
        rates = ", ".join(f"{x:.2f}" for x in r["acceptance_rate_per_position"])
        lossless = "" if r["lossless"] is None else f"; lossless {r['lossless']}"
        lines.append(
            f"  AL (K={r['num_speculative_tokens']})   "
            f"{r['mean_acceptance_length']:.3f} {label} (marginal per position "
            f"{rates}; {r['num_prompts']} held-out prompts{lossless})"
        )
    return lines


_NAMES = {"dspark": "DSpark", "dflash": "DFlash", "xpress": "XPress"}


def _block_lines(block: dict[str, Any] | None) -> list[str]:
    """The block drafter's run and acceptance length (``--block-drafter``)."""
    if not block:
        return []
    name = _NAMES.get(block["algorithm"], block["algorithm"])
    losses = block.get("losses") or []
    first, last = (losses[0], losses[-1]) if losses else (None, None)
    r = block["trained"]
    rates = ", ".join(f"{x:.2f}" for x in r["acceptance_rate_per_position"])
    return [
        f"  {name:<12} {block['checkpoint']} (train loss {_num(first)} -> "
        f"{_num(last)} over {len(losses)} steps)",
        f"  AL (K={r['num_speculative_tokens']})   "
        f"{r['mean_acceptance_length']:.3f} {name} trained, greedy (marginal per "
        f"position {rates}; {r['num_prompts']} held-out prompts; lossless "
        f"{r['lossless']})",
    ]


def format_report(r: dict[str, Any]) -> str:
    """``run_demo``'s report as the lines ``speculators-kimi demo`` prints."""
    block = r.get("block_drafter")
    title = "EAGLE-3" + (
        f" and {_NAMES.get(block['algorithm'], block['algorithm'])}" if block else ""
    )
    return "\n".join(
        [
            f"{title} demo on a tiny Kimi-K2.5-shaped verifier",
            f"  verifier     {r['verifier']}",
            f"  data         {r['data']} ({r['samples']} samples, aux layers "
            f"{r['target_layer_ids']})",
            f"  draft        {r['checkpoint']} ({r['draft_class']}, "
            f"{r.get('draft_arch')} layers, "
            f"{r['draft_trainable_params']} trainable parameters, draft vocabulary "
            f"{r.get('draft_vocab_size')}; verifier {r['verifier_architectures']})",
            f"  train loss   {_num(r['loss_first'])} -> {_num(r['loss_last'])} over "
            f"{r['train_steps']} steps",
            f"  held-out     loss {_num(r['val_loss'])}, step-0 draft accuracy "
            f"{_num(r['val_step0_accuracy'])}",
            *_acceptance_lines(r.get("acceptance") or {}),
            *_block_lines(block),
            f"  wall time    {r['seconds']} s (this invocation)",
        ]
    )
